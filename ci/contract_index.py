#!/usr/bin/env python3
"""Regenerates the tail of docs/contract.md from the rules above it: the "Not yet proven by a
case" list, the "Proven only outside the shared suite" list, the case index (every case and
scenario with the rules citing it) and the link definitions of the cases.

Usage: ci/contract_index.py   (from anywhere; rewrites docs/contract.md in place)

Run it after adding a rule or a case; `cargo test -p brokertest --test contract_doc` checks
the result (and everything this script cannot: section citations in the code, links).
"""
import os
import re
import sys

root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
doc=open(f'{root}/docs/contract.md').read()
# cut generated tail
marker='\n## Not yet proven by a case'
if marker in doc: doc=doc[:doc.index(marker)]
lines=doc.split('\n')
rules=[]; cur=None
for l in lines:
    m=re.match(r'^- \*\*§(E?\d+(?:\.\d+)+)\*\*(.*)',l)
    if m:
        cur=[m.group(1),m.group(2)]; rules.append(cur); continue
    if cur and l.startswith('  '):
        cur[1]+='\n'+l; continue
    cur=None
CASE=r'\[((?:c\d{2}|q\d|w\d{2})_[a-z0-9_]+)\](?![(:\[])'
def cases_of(t): return re.findall(CASE,t)
def suite(t): return bool(cases_of(t)) or any(x in t for x in ['[model]','[history]','[races]','every case'])
unproven=[];outside=[]
seen=set()
rules=[[n,re.sub(r'\s+',' ',t)] for n,t in rules]
for n,t in rules:
    assert n not in seen, n; seen.add(n)
    has_p='Proven by' in t; has_u='*Not yet proven by a case.*' in t
    assert has_p!=has_u, (n, t[:80])
    if has_u: unproven.append(n)
    elif not suite(t): outside.append(n)
# case files
case_file={}
for f in sorted(os.listdir(f'{root}/brokertest/src/cases')):
    for m in re.finditer(r'pub async fn ((?:c\d{2}|q\d)_[a-z0-9_]+)',open(f'{root}/brokertest/src/cases/{f}').read()):
        case_file[m.group(1)]=f'../brokertest/src/cases/{f}'
for f in sorted(os.listdir(f'{root}/workertest/src/scenarios')):
    for m in re.finditer(r'pub async fn (w\d{2}_[a-z0-9_]+)',open(f'{root}/workertest/src/scenarios/{f}').read()):
        case_file[m.group(1)]=f'../workertest/src/scenarios/{f}'
blist=re.findall(r'^ {12}((?:c\d{2}|q\d)_[a-z0-9_]+),$',open(f'{root}/brokertest/src/lib.rs').read(),re.M)
wlist=re.findall(r'^ {12}(w\d{2}_[a-z0-9_]+),$',open(f'{root}/workertest/src/lib.rs').read(),re.M)
cited={}
for n,t in rules:
    for c in cases_of(t): cited.setdefault(c,[]).append(n)
allc=blist+wlist
missing=[c for c in allc if c not in cited]
extra=[c for c in cited if c not in allc]
print('rules',len(rules),'unproven',len(unproven),'outside',len(outside),'missing',missing,'extra',extra, file=sys.stderr)
def summary(n):
    t=dict(rules)[n]
    t=re.sub(r'\s+',' ',t).strip()
    t=re.sub(r'\s*(Decided|Proven by):.*$','',t)
    t=t.replace('*Not yet proven by a case.*','').strip()
    words=t.split(' ')
    out=''
    for w in words:
        if len(out)+len(w)>100: return out.rstrip(',;:')+' …'
        out+=(' ' if out else '')+w
    return out
out=[]
out.append('\n## Not yet proven by a case\n')
out.append('Rules no automated test checks yet. Each is a rule above, marked there too.\n')
for n in unproven: out.append(f'- §{n} — {summary(n)}')
out.append('\n### Proven only outside the shared suite\n')
out.append('Rules checked by a backend-specific or unit test but by no shared case, model or history\nrun (so a new backend is not held to them by the suite):\n')
for n in outside: out.append(f'- §{n} — {summary(n)}')
out.append('\n## Case index\n')
out.append('Every case and scenario, its file, and the rules above that cite it.\n')
out.append('| case | rules |\n|---|---|')
def key(c): return allc.index(c)
for c in allc:
    rs=', '.join('§'+r for r in dict.fromkeys(cited.get(c,[])))
    out.append(f'| [{c}] | {rs} |')
out.append('')
for c in allc: out.append(f'[{c}]: {case_file[c]}')
out.append('[model]: ../brokertest/src/model/mod.rs')
out.append('[history]: ../brokertest/src/model/history/mod.rs')
out.append('[races]: ../brokertest/src/races.rs')
open(f'{root}/docs/contract.md','w').write(doc.rstrip('\n')+'\n'+'\n'.join(out)+'\n')
