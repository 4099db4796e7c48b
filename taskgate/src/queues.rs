//! [`QueueList`]: the queues a claim reads from, as one object-safe parameter that takes an
//! array literal, a `Vec<String>` or a borrowed slice alike, so `Arc<dyn Broker>` keeps working
//! and a runtime passes its own queue list without building a `Vec<&str>` per claim.

use std::fmt;
use std::sync::Arc;

/// The queues a claim reads from ([`Broker::dequeue`](crate::Broker::dequeue) and friends).
///
/// Callers pass `&` of any of: an array (`&["mail", "sms"]`, `&[&name]` with `name: String`),
/// a `Vec<String>` or `Vec<&str>`, an `Arc<[String]>` or `Box<[String]>`, or a slice reference
/// (`&queues` where `queues: &[String]` or `&[&str]`). A backend reads it through
/// [`QueueList::get`] and [`QueueList::len`], or collects it with `to_vec`. Only an empty
/// array literal needs its type spelled out: `&[] as &[&str; 0]`.
///
/// ```
/// use taskgate::QueueList;
///
/// fn names(queues: &dyn QueueList) -> Vec<&str> {
///     queues.to_vec()
/// }
/// let owned: Vec<String> = vec!["mail".into(), "sms".into()];
/// assert_eq!(names(&owned), ["mail", "sms"]);
/// assert_eq!(names(&["mail"]), ["mail"]);
/// let borrowed: &[&str] = &["a", "b"];
/// assert_eq!(names(&borrowed), ["a", "b"]);
/// let name = String::from("mail");
/// assert_eq!(names(&[&name]), ["mail"]);
/// assert!(names(&[] as &[&str; 0]).is_empty());
/// ```
pub trait QueueList: Sync {
    /// How many queues the list holds (an empty list is refused by every claim).
    fn len(&self) -> usize;

    /// The queue at `index`; `None` past the end.
    fn get(&self, index: usize) -> Option<&str>;

    /// True when the list holds no queue.
    fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

impl<'a> dyn QueueList + 'a {
    /// The queues in order.
    pub fn iter(&self) -> impl Iterator<Item = &str> + '_ {
        (0..self.len()).filter_map(move |i| self.get(i))
    }

    /// The queues in order, collected.
    pub fn to_vec(&self) -> Vec<&str> {
        self.iter().collect()
    }
}

impl fmt::Debug for dyn QueueList + '_ {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_list().entries(self.iter()).finish()
    }
}

/// Arrays of any string type: `&["q"]`, and `&[&name]` with `name: String`. The empty
/// literal has no element type to infer: write `&[] as &[&str; 0]`.
impl<S: AsRef<str> + Sync, const N: usize> QueueList for [S; N] {
    fn len(&self) -> usize {
        N
    }

    fn get(&self, index: usize) -> Option<&str> {
        <[S]>::get(self, index).map(AsRef::as_ref)
    }
}

impl<S: AsRef<str> + Sync> QueueList for &[S] {
    fn len(&self) -> usize {
        <[S]>::len(self)
    }

    fn get(&self, index: usize) -> Option<&str> {
        <[S]>::get(self, index).map(AsRef::as_ref)
    }
}

impl<S: AsRef<str> + Sync> QueueList for Vec<S> {
    fn len(&self) -> usize {
        self.as_slice().len()
    }

    fn get(&self, index: usize) -> Option<&str> {
        self.as_slice().get(index).map(AsRef::as_ref)
    }
}

impl<S: AsRef<str> + Sync> QueueList for Box<[S]> {
    fn len(&self) -> usize {
        <[S]>::len(self)
    }

    fn get(&self, index: usize) -> Option<&str> {
        <[S]>::get(self, index).map(AsRef::as_ref)
    }
}

impl<S: AsRef<str> + Send + Sync> QueueList for Arc<[S]> {
    fn len(&self) -> usize {
        <[S]>::len(self)
    }

    fn get(&self, index: usize) -> Option<&str> {
        <[S]>::get(self, index).map(AsRef::as_ref)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn seen(queues: &dyn QueueList) -> (usize, Vec<&str>, String) {
        (queues.len(), queues.to_vec(), format!("{queues:?}"))
    }

    #[test]
    fn every_form_reads_the_same() {
        let expected = (2, vec!["a", "b"], r#"["a", "b"]"#.to_owned());
        let owned: Vec<String> = vec!["a".into(), "b".into()];
        let refs: Vec<&str> = vec!["a", "b"];
        let slice: &[String] = &owned;
        let shared: Arc<[String]> = owned.clone().into();
        let boxed: Box<[&str]> = refs.clone().into_boxed_slice();
        assert_eq!(seen(&["a", "b"]), expected);
        assert_eq!(seen(&owned), expected);
        assert_eq!(seen(&refs), expected);
        assert_eq!(seen(&slice), expected);
        assert_eq!(seen(&shared), expected);
        assert_eq!(seen(&boxed), expected);
        let empty: (usize, Vec<&str>, String) = (0, vec![], "[]".to_owned());
        assert_eq!(seen(&[] as &[&str; 0]), empty);
        assert!(QueueList::is_empty(&[] as &[String; 0]));
        let (a, b) = (String::from("a"), String::from("b"));
        assert_eq!(seen(&[&a, &b]), expected);
        assert_eq!(seen(&[a, b]), expected);
        assert_eq!(QueueList::get(&["a"], 1), None);
    }
}
