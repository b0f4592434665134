#!/usr/bin/env python3
"""Summarise measure.sh's results for one mode:

    trace-summary.py MODE TRACE.jsonl SAVES.jsonl AGENT.log

Prints the first save's file events in order (ms from the step folder's
creation), then over every save: shards' first write to last close, last
shard close -> .metadata renamed, .metadata -> dcp.save returned on every
rank, and time to durable (dcp.save returned -> the agent's "committed
step" log line; with `ferry commit`, also to the call's return): median,
min and max."""

import json
import re
import statistics
import sys
from datetime import datetime


def main():
    mode, trace_path, saves_path, agent_path = sys.argv[1:5]
    events = [json.loads(line) for line in open(trace_path)]
    saves = {r["step"]: r for r in map(json.loads, open(saves_path))}
    commits = {}
    for line in open(agent_path):
        try:
            r = json.loads(line)
        except json.JSONDecodeError:
            continue
        if r.get("msg", "").startswith("committed step"):
            commits[r["step"]] = datetime.fromisoformat(r["ts"].replace("Z", "+00:00")).timestamp()
    by_step = {}
    for e in events:
        m = re.match(r"step-(\d+)(/|$)", e.get("path", ""))
        if m:
            by_step.setdefault(int(m.group(1)), []).append(e)
    rows = {"write": [], "meta": [], "ret": [], "ttd": [], "call": []}
    first = True
    for step in sorted(by_step):
        evs = by_step[step]
        t0 = evs[0]["t"]
        if first:
            first = False
            print(f"{mode}: file events of step-{step}/ (ms from the folder's creation)")
            for e in evs:
                size = "" if e["size"] is None else f" {e['size']} B"
                print(f"  {1000 * (e['t'] - t0):8.1f}  {e['ev']:<12} {e['path']}{size}")
            if step in saves:
                s = saves[step]
                print(f"  {1000 * (s['returned'] - t0):8.1f}  dcp.save returned on every rank")
        shard_w = [e["t"] for e in evs if e["path"].endswith(".distcp") and e["ev"] in ("CREATE", "MODIFY")]
        shard_c = [e["t"] for e in evs if e["path"].endswith(".distcp") and e["ev"] == "CLOSE_WRITE"]
        meta = [e["t"] for e in evs if e["path"].endswith("/.metadata") and e["ev"] == "MOVED_TO"]
        if shard_w and shard_c:
            rows["write"].append(max(shard_c) - min(shard_w))
        if shard_c and meta:
            rows["meta"].append(meta[-1] - max(shard_c))
        if step in saves and meta:
            rows["ret"].append(saves[step]["returned"] - meta[-1])
        if step in saves and step in commits:
            rows["ttd"].append(commits[step] - saves[step]["returned"])
        if "durable" in saves.get(step, {}):
            rows["call"].append(saves[step]["durable"] - saves[step]["returned"])
    names = {"write": "shards: first write -> last close", "meta": "last shard closed -> .metadata renamed",
             "ret": ".metadata renamed -> dcp.save returned (all ranks)",
             "ttd": "time to durable: dcp.save returned -> committed",
             "call": "dcp.save returned -> `ferry commit` returned"}
    print(f"{mode}: over {len(rows['ttd'])} saves (median, min-max, seconds)")
    for k, v in rows.items():
        if v:
            print(f"  {names[k]:<52} {statistics.median(v):7.3f}  {min(v):7.3f}-{max(v):.3f}")
    missing = sorted(set(saves) - set(commits))
    if missing:
        print(f"  NOT committed: steps {missing}")


if __name__ == "__main__":
    main()
