# residual-correction scan (session 29, join29), offline on the diagnosis rows; settings per fold as calibration chose them on this session's cached quick models (lik_sd, (amplitude/lik_sd, length)); 'noise=run': the GP's noise the calibrated run noise 0.026 instead of the likelihood width
import sys, numpy as np, pandas as pd
from airflow_provider_bellamy.model.finetuning import residual_correction
LIK = {'join':[0.467,0.219,0.116,0.231,0.223],'etl':[0.125,0.141,0.247,0.150,0.219],'wordcount':[0.125,0.259,0.256,0.247,0.251]}
CHOSEN = {'join':[(4,.35),(1,.7),(4,.35),(4,.35),(1,.7)],'etl':[(1,.7),(1,.7),(1,.7),(2,.7),(4,.35)],'wordcount':[(2,.7),(2,.7),(2,.7),(2,.7),(1,.7)]}
NOISE=0.026
job=sys.argv[1]; f=pd.read_csv(sys.argv[2])
def pred(r, amp_rel, length, noise, own=False):
    if not isinstance(r.run_residuals,str) or r.k<2: return r.tuned
    pairs=[p.split(':') for p in r.run_residuals.split()]
    ns=np.array([float(a) for a,_ in pairs]); res=np.array([float(b) for _,b in pairs])
    lik=LIK[job][r.fold]
    a,l = CHOSEN[job][r.fold] if own else (amp_rel,length)
    c=residual_correction(ns,res,np.array([r.scale_out],float),amplitude=a*lik,length=l,noise_sd=noise if noise else lik)[0]
    return r.uncorrected*np.exp(c)
rows=[]
variants={'base(recomputed)':dict(own=True,noise=None,amp_rel=0,length=0),'chosen, noise=run':dict(own=True,noise=NOISE,amp_rel=0,length=0)}
for a in (1,2,4):
    for l in (0.35,0.7,1.0):
        variants[f'a{a} l{l} noise=run']=dict(own=False,noise=NOISE,amp_rel=a,length=l)
        variants[f'a{a} l{l} noise=lik']=dict(own=False,noise=None,amp_rel=a,length=l)
out={}
for name,v in variants.items():
    p=f.apply(lambda r: pred(r,v['amp_rel'],v['length'],v['noise'],v['own']),axis=1)
    e=(p-f.actual).abs()/f.actual
    out[name]=e.groupby(f.k).mean()
print(job); print((pd.DataFrame(out).T*100).round(2).to_string())
