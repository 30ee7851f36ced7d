#!/usr/bin/env python3
# Runs of weight loads (L: LDG ... .128 whose text contains the pattern, default CONSTANT), HMMA (M) and
# BAR.SYNC (B) in a SASS dump (cuobjdump -sass), each as <kind><count>@<address>, over the dump's
# lines [begin, end) (0-based; `grep -n "Function :"` gives 1-based line numbers of the functions):
# python3 scripts/sass_load_runs.py <sass.txt> <begin> <end> [pattern]. "L16 M32" is a warp issuing
# its 16 loads before its mmas; "L2 M2 L2 M2 ..." one step at a time (session 21, run 6).
import re,sys
if len(sys.argv) < 4:
    sys.exit("usage: sass_load_runs.py <sass.txt> <begin line> <end line> [pattern]")
lines=open(sys.argv[1]).read().splitlines()[int(sys.argv[2]):int(sys.argv[3])]
ins=[]
for l in lines:
    m=re.match(r'\s*/\*([0-9a-f]{4,6})\*/\s+(.*?);',l)
    if m: ins.append((int(m.group(1),16),m.group(2).strip()))
runs=[]; cur=None
pat=sys.argv[4] if len(sys.argv)>4 else 'CONSTANT'
for addr,t in ins:
    k='L' if (pat in t and 'LDG' in t and '.128' in t) else ('M' if 'HMMA' in t else ('B' if 'BAR.SYNC' in t else None))
    if k is None: continue
    if cur and cur[0]==k: cur[1]+=1
    else:
        if cur: runs.append(cur)
        cur=[k,1,addr]
if cur: runs.append(cur)
print(' '.join(f"{k}{n}@{a:x}" for k,n,a in runs))
