# SPDX-License-Identifier: Apache-2.0
# Offline: krex::compare verdict rules and intervals over a krex_gpu_compare
# --json file's every sample. Pools consecutive comparisons (groups of 1, 2,
# 4, 5) to emulate more samples per comparison; rule "band" = the interval
# wholly past 1 +- tolerance (the old verdict), "excl1" = same inside the band,
# else faster/slower once the interval excludes 1 (the current one).
#   python3 lab/scripts/compare_rules.py [compare.json]   (needs numpy, scipy)
import json, math, numpy as np
from scipy import stats
import sys
d=json.load(open(sys.argv[1] if len(sys.argv) > 1 else 'lab/results/compare-h200/compare1.json'))
R=d['records']
def pairs(order, m=2):
    out=[];cnt=[0,0]
    for b0 in range(0,len(order),4):
        blk=order[b0:b0+4]; mine=[[],[]]
        for s,c in enumerate(blk):
            mine[c].append((cnt[c], (b0+s)%2)); cnt[c]+=1
        for i in range(len(mine[1])):
            f = 0 if mine[0][0][1]==mine[1][i][1] else 1
            out.append((mine[1][i][0], mine[0][f][0]))
    return out
def logratios(rec, key):
    o=rec[key+'_order']; s=rec[key+'_samples_ms']
    p=pairs(o)
    lr=np.array([math.log(s[1][a]/s[0][b]) for a,b in p])
    return lr
def sign_ci(x, alpha):
    x=np.sort(x); n=len(x)
    k=0
    for i in range(n//2):
        if 2*stats.binom.cdf(i,n,0.5)>alpha: break
        k=i+1
    return x[k-1], x[n-k]
def t_ci(x, alpha):
    n=len(x); m=x.mean(); se=x.std(ddof=1)/math.sqrt(n); t=stats.t.ppf(1-alpha/2,n-1)
    return m-t*se, m+t*se
def trim_ci(x, alpha, g=0.1):
    # Yuen trimmed mean CI
    x=np.sort(x); n=len(x); k=int(g*n); h=n-2*k
    tm=x[k:n-k].mean()
    w=x.copy(); w[:k]=x[k]; w[n-k:]=x[n-k-1]
    sw=w.var(ddof=1); se=math.sqrt(sw)/( (1-2*g)*math.sqrt(n))
    t=stats.t.ppf(1-alpha/2,h-1)
    return tm-t*se, tm+t*se
def hl_ci(x, alpha):
    n=len(x); w=np.add.outer(x,x)/2; w=np.sort(w[np.triu_indices(n)])
    N=len(w); z=stats.norm.ppf(1-alpha/2)
    c=int(math.floor(n*(n+1)/4 - z*math.sqrt(n*(n+1)*(2*n+1)/24)))
    return w[c], w[N-1-c]
def decide(lo,hi,tol,rule):
    lo=math.exp(lo);hi=math.exp(hi)
    if rule=='band':
        if lo>=1-tol and hi<=1+tol: return 'same'
        if hi<1-tol: return 'faster'
        if lo>1+tol: return 'slower'
        return 'unsure'
    if rule=='excl1':
        if lo>=1-tol and hi<=1+tol: return 'same'
        if hi<1: return 'faster'
        if lo>1: return 'slower'
        return 'unsure'
for group in (1,2,4,5):
  for alpha in (0.05,0.01):
    for name,ci in (('sign',sign_ci),('t',t_ci),('trim',trim_ci),('hl',hl_ci)):
      for rule in ('band','excl1'):
        res={'pair':{},'id':{}}; widths=[]
        for g0 in range(0,len(R)-group+1,group):
            grp=R[g0:g0+group]
            lp=np.concatenate([logratios(r,'pair')*(-1 if r['b_first'] else 1) for r in grp])
            li=np.concatenate([logratios(r,'identical') for r in grp])
            lo,hi=ci(lp,alpha); v=decide(lo,hi,0.005,rule); widths.append(math.exp(hi)-math.exp(lo))
            res['pair'][v]=res['pair'].get(v,0)+1
            lo,hi=ci(li,alpha); v=decide(lo,hi,0.005,rule)
            res['id'][v]=res['id'].get(v,0)+1
        N=len(R)//group
        print(f"n={60*group:4d} a={alpha} {name:5s} {rule:6s} pair right {100*res['pair'].get('slower',0)/N:5.1f} wrong {100*res['pair'].get('faster',0)/N:4.1f} | id fs {100*(res['id'].get('faster',0)+res['id'].get('slower',0))/N:4.1f} same {100*res['id'].get('same',0)/N:5.1f} | w {100*np.median(widths):.2f}")
print('---')
ids=np.array([np.median(logratios(r,'identical')) for r in R]); ps=np.array([np.median(logratios(r,'pair')*(-1 if r['b_first'] else 1)) for r in R])
print('identical median-of-medians %.4f%% mean %.4f%% sd %.4f%%'%(100*np.median(ids),100*ids.mean(),100*ids.std()))
print('pair median-of-medians %.4f%% sd %.4f%%'%(100*np.median(ps),100*ps.std()))
# per-placement effect in identical
allid=np.concatenate([logratios(r,'identical') for r in R])
print('all identical pairs mean %.4f%% median %.4f%% n=%d'%(100*allid.mean(),100*np.median(allid),len(allid)))
# by position within double round: pair index j%2
for r in R[:1]: pass
