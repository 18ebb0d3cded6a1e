#!/usr/bin/env python3
"""Writes expected.json: the serving metrics of each recorded trial here,
computed with numpy as `vllm bench serve` computes them (calculate_metrics
in vllm/benchmarks/serve.py@2e2bf3cb16509a3bf7f66bb532a8a561b26a280f of
flytiger-eco/vllm-for-sail; the same formulas as calculate_metrics in
SGLang's python/sglang/bench_serving.py@84118acf50b3), restated for
arpatch's samples: a request succeeded when it has no "error"; output_len
is its completion_tokens, prompt_len its prompt_tokens; latency is e2e_s,
ttft ttft_s, itl itl_s. harness/stats's TestServingMatchesVLLM compares
ComputeServing with this file.

It also writes trial-c4-x10.json: trial-c4-errors.json with every time
(starts relative to the first, ttft, e2e, itl, wall) multiplied by 10, so
that the trial spans several seconds and the per-second peaks have more
than one bucket.

Run with a Python that has numpy: python3 vllm_metrics.py (in this
directory).
"""
import json
import re
from datetime import datetime, timezone

import numpy as np

PERCENTILES = [25, 50, 90, 99, 99.9]
METRICS = ["ttft", "tpot", "itl", "e2el"]


def seconds(ts):
    """An RFC 3339 time as float seconds since the epoch, from its
    nanoseconds (datetime keeps microseconds only)."""
    return nanos(ts) / 1e9


def metrics(trial):
    dur_s = trial["wall_s"]
    outs = trial["samples"]
    completed = failed = total_input = 0
    output_lens, itls, tpots, ttfts, e2els = [], [], [], [], []
    for o in outs:
        if o.get("error"):
            failed += 1
            output_lens.append(0)
            continue
        n = o["completion_tokens"]
        output_lens.append(n)
        total_input += o["prompt_tokens"]
        if n > 1:
            tpots.append((o["e2e_s"] - o["ttft_s"]) / (n - 1))
        itls += o.get("itl_s", [])
        ttfts.append(o["ttft_s"])
        e2els.append(o["e2e_s"])
        completed += 1
    ok = [o for o in outs if not o.get("error")]
    t0 = min(seconds(o["start"]) for o in ok)
    end = max(seconds(o["start"]) - t0 + o["e2e_s"] for o in ok)
    nsec = int(np.ceil(end)) + 1
    tok = np.zeros(nsec)
    conc = np.zeros(nsec)
    for o in ok:
        st = seconds(o["start"]) - t0
        times = [st + o["ttft_s"]]
        cur = times[0]
        for g in o.get("itl_s", []):
            cur += g
            times.append(cur)
        for t in times:
            b = int(t)
            if 0 <= b < nsec:
                tok[b] += 1
        for sec in range(int(st), min(int(st + o["e2e_s"]) + 1, nsec)):
            conc[sec] += 1
    res = {
        "duration": dur_s,
        "completed": completed,
        "failed": failed,
        "total_input_tokens": total_input,
        "total_output_tokens": sum(output_lens),
        "request_throughput": completed / dur_s,
        "output_throughput": sum(output_lens) / dur_s,
        "total_token_throughput": (total_input + sum(output_lens)) / dur_s,
        "max_output_tokens_per_s": float(np.max(tok)),
        "max_concurrent_requests": int(np.max(conc)),
    }
    vals = {"ttft": ttfts, "tpot": tpots, "itl": itls, "e2el": e2els}
    for m in METRICS:
        xs = vals[m]
        res[f"mean_{m}_ms"] = float(np.mean(xs or 0) * 1000)
        res[f"median_{m}_ms"] = float(np.median(xs or 0) * 1000)
        res[f"std_{m}_ms"] = float(np.std(xs or 0) * 1000)
        for p in PERCENTILES:
            word = str(int(p)) if int(p) == p else str(p)
            res[f"p{word}_{m}_ms"] = float(np.percentile(xs or 0, p) * 1000)
    return res


def nanos(ts):
    """An RFC 3339 time as integer nanoseconds since the epoch."""
    m = re.match(r"^(.*T\d\d:\d\d:\d\d)(?:\.(\d+))?Z$", ts)
    whole = datetime.strptime(m.group(1), "%Y-%m-%dT%H:%M:%S").replace(tzinfo=timezone.utc)
    frac = (m.group(2) or "0").ljust(9, "0")[:9]
    return int(whole.timestamp()) * 10**9 + int(frac)


def rfc3339(ns):
    whole = datetime.fromtimestamp(ns // 10**9, tz=timezone.utc)
    return whole.strftime("%Y-%m-%dT%H:%M:%S") + ".%09dZ" % (ns % 10**9)


def scaled(trial, k):
    t = json.loads(json.dumps(trial))
    t0 = min(nanos(o["start"]) for o in t["samples"])
    for o in t["samples"]:
        o["start"] = rfc3339(t0 + (nanos(o["start"]) - t0) * k)
        o["ttft_s"] *= k
        o["e2e_s"] *= k
        if "itl_s" in o:
            o["itl_s"] = [g * k for g in o["itl_s"]]
    t["wall_s"] *= k
    return t


if __name__ == "__main__":
    trials = {}
    for name in ["trial-c4-errors.json", "trial-one-token.json"]:
        with open(name) as f:
            trials[name] = json.load(f)
    trials["trial-c4-x10.json"] = scaled(trials["trial-c4-errors.json"], 10)
    with open("trial-c4-x10.json", "w") as f:
        json.dump(trials["trial-c4-x10.json"], f, indent=1)
    out = {"percentiles": PERCENTILES, "metrics": METRICS,
           "trials": {name: metrics(t) for name, t in sorted(trials.items())}}
    with open("expected.json", "w") as f:
        json.dump(out, f, indent=1)
        f.write("\n")
