//! The hot statements exactly as the engine runs them, with representative arguments, so a
//! backend can check their query plans (extensions §E6: every hot statement must use an index
//! whose leading columns exclude finished rows).

use taskgate::{id, Timestamp};

use crate::dialect::{ClaimShape, TimeSource};
use crate::ops::{ack, claim, propagate, reap};
use crate::{SqlBroker, Value};

/// One hot statement, ready for `EXPLAIN`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HotStatement {
    /// What it does: `next_due`, `claim`, `ack_lock`, `ack_write`, `reap`, `children`,
    /// `repair`.
    pub name: &'static str,
    /// The statement text in the dialect.
    pub sql: String,
    /// Arguments of the right kinds and count.
    pub args: Vec<Value>,
}

impl SqlBroker {
    /// The hot statements for a claim on `queue` and an ack of task `id` at time `now`, in the
    /// forms this handle runs them (with the server's time read inside the claim and ack
    /// statements when no injected or local clock gives "now").
    pub fn hot_statements(&self, queue: &str, id: &str, now: Timestamp) -> Vec<HotStatement> {
        let core = self.core();
        let server_now = core.dialect.time_source() == TimeSource::Server
            && core.life.options().is_ok_and(|o| core.local_now(&o).is_none());
        let full = core.life.options().is_ok_and(|o| o.notifier.is_active());
        let (q, task, t) = (Value::from(queue), Value::from(id), Value::from(now));
        let claim = match core.dialect.claim_shape() {
            ClaimShape::UpdateReturning => HotStatement {
                name: "claim",
                sql: claim::claim_update_sql(core, 1, "?", 1).to_string(),
                args: vec![
                    Value::Text(id::new_ulid()),
                    t.clone(),
                    t.clone(),
                    q.clone(),
                    t.clone(),
                    Value::Int(10),
                ],
            },
            ClaimShape::UpdateSkipLocked => HotStatement {
                name: "claim",
                sql: claim::claim_skip_locked_sql(core, 1, "?", 1, false, false).to_string(),
                args: vec![
                    if server_now { Value::Null(crate::Kind::Int) } else { t.clone() },
                    Value::Text(id::new_ulid()),
                    Value::Int(60_000),
                    q.clone(),
                    Value::Int(10),
                ],
            },
            ClaimShape::SelectThenUpdate if server_now => HotStatement {
                name: "claim",
                sql: claim::claim_select_sql(core, 1, true).to_string(),
                args: vec![q.clone(), Value::Int(10)],
            },
            ClaimShape::SelectThenUpdate => HotStatement {
                name: "claim",
                sql: claim::claim_select_sql(core, 1, false).to_string(),
                args: vec![q.clone(), t.clone(), Value::Int(10)],
            },
        };
        let token = Value::from("token");
        let ack = if core.dialect.update_returning() {
            let mut args = Vec::new();
            if !server_now {
                args.push(t.clone());
            }
            let sql = if core.dialect.array_params() {
                args.push(Value::TextArray(vec![id.to_owned()]));
                args.push(Value::TextArray(vec!["token".to_owned()]));
                ack::ack_unnest_sql(core, false, server_now, false)
            } else {
                args.extend([task.clone(), task.clone(), token]);
                ack::ack_returning_sql(core, 1, false, server_now, false)
            };
            vec![HotStatement { name: "ack", sql: sql.to_string(), args }]
        } else {
            vec![
                HotStatement {
                    name: "ack_lock",
                    sql: if full {
                        ack::ack_lock_sql(core, 1).to_string()
                    } else {
                        ack::ack_lock_slim_sql(core, 1).to_string()
                    },
                    args: vec![task.clone()],
                },
                HotStatement {
                    name: "ack_write",
                    sql: ack::ack_complete_sql(core, 1, false).to_string(),
                    args: vec![t.clone(), task.clone()],
                },
            ]
        };
        let mut hot = vec![
            HotStatement {
                name: "next_due",
                sql: claim::probe_sql(core, 1).to_string(),
                args: vec![t.clone(), q],
            },
            claim,
        ];
        hot.extend(ack);
        hot.extend([
            HotStatement { name: "reap", sql: core.sql(reap::REAP_SQL).to_string(), args: vec![t] },
            HotStatement {
                name: "children",
                sql: core.sql(propagate::CHILDREN_SQL).to_string(),
                args: vec![task],
            },
            HotStatement {
                name: "repair",
                sql: core.sql(reap::BLOCKED_SQL).to_string(),
                args: vec![],
            },
        ]);
        hot
    }
}
