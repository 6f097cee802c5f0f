#!/usr/bin/env python3
# Per-round old/new time ratios from decode_attention_bench runs: files of "== old|new th T
# HEADS=.. KV_HEADS=.. HEAD_DIM=.." headers, each followed by the bench's lines (the old binary
# prints per-head and shared-tile times; the path the engine took is compared: shared tiles
# from 4 heads per KV head, else per head). Binaries that print plain "L n: t ms" lines count
# as the header's label says (old or new). An optional " BATCH=b" ends the header (default 8).
#   scripts/decode-attention-ratios.py benchmarks/decode-attention-pairs-2026-12-03-*.txt
import re,collections,statistics,sys
d=collections.defaultdict(list)
for fn in sys.argv[1:]:
    cur=None
    for line in open(fn):
        m=re.match(r'== (\w+) th (\d) HEADS=(\d+) KV_HEADS=(\d+) HEAD_DIM=(\d+)(?: BATCH=(\d+))?',line)
        if m: cur=m.groups(); continue
        b,th,h,kv,hd,batch=cur
        hd=hd+'/b'+(batch or '8')
        m=re.match(r'L +(\d+): +per-head +([\d.]+) ms.*shared tiles +([\d.]+) ms',line)
        if m:
            L=int(m.group(1)); ph=float(m.group(2)); sh=float(m.group(3))
            d[(th,h,kv,hd,L,'old')].append(sh if int(h)//int(kv)>=4 else ph); continue
        m=re.match(r'L +(\d+): +([\d.]+) ms',line)
        if m: d[(th,h,kv,hd,int(m.group(1)),b)].append(float(m.group(2)))
for k in sorted({k[:5] for k in d}, key=lambda k:(k[0],-int(k[1])//int(k[2]),k[3],k[4])):
    o=d[k+('old',)]; n=d[k+('new',)]
    r=sorted(a/b for a,b in zip(o,n))
    print(f"th {k[0]} {k[1]}/{k[2]}x{k[3]} L {k[4]:5d}: old med {statistics.median(o):8.3f} ms new med {statistics.median(n):8.3f} ms  ratio med {statistics.median(r):.2f} [{r[0]:.2f}-{r[-1]:.2f}] n={len(r)}")
