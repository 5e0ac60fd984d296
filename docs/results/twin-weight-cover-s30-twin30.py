# Throw-away (session 30, twin30): the band rows of twin-weight-bands against the weighted predictions of twin-weight-s30-twin30.py
import pandas as pd, numpy as np
out=[]
for ds, jobs in [("s21",["join","etl","wordcount"]),("c3o",["grep","kmeans","pagerank","sgd","sort"]),("s22",["scan","sessionize","train"])]:
    for j in jobs:
        w=pd.read_csv(f"/tmp/twin30/weighted-{ds}-{j}.csv"); b=pd.read_csv(f"/tmp/twin30/band-{ds}-{j}.csv")
        assert len(w)==len(b) and np.allclose(w.actual,b.actual) and np.allclose(w.ship,b.pred,rtol=1e-9), (ds,j)
        for k in (3,5):
            m=(w.k==k).to_numpy()
            lo, hi = (b.lower/b.pred).to_numpy()[m], (b.upper/b.pred).to_numpy()[m]
            a=w.actual.to_numpy()[m]
            row=dict(ds=ds,job=j,k=k)
            for name,col in (("ship","ship"),("weighted","weighted_argued")):
                p=w[col].to_numpy()[m]
                row[f"{name}_under_hi"]=np.mean(a<=p*hi)*100; row[f"{name}_above_lo"]=np.mean(a>=p*lo)*100
            row["width"]=np.mean(np.log(hi/lo)); row["twin_w"]=w.w_argued[m].mean()
            out.append(row)
f=pd.DataFrame(out).round(1); f["width"]=pd.DataFrame(out)["width"].round(3); f["twin_w"]=pd.DataFrame(out)["twin_w"].round(3)
print("90 % band of the shipping tuned model (predict_band, same draws), its ratios to the prediction moved onto the weighted one (offline: the band is not re-measured)")
print(f.to_string(index=False))
