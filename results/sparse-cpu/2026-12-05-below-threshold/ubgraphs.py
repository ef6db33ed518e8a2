"""Split a GGML_SCHED_DEBUG=2 log into the graphs computed after the last reserve; print a summary."""
import re, sys, hashlib, json
def graphs(path):
    lines = open(path, errors="replace").read().splitlines()
    last = max(i for i, l in enumerate(lines) if "compute buffer size =" in l and l.startswith("sched_reserve"))
    gs, cur = [], None
    for l in lines[last + 1:]:
        if l.startswith("## SPLIT #0"):
            cur = []; gs.append(cur)
        elif l.startswith("## SPLIT"):
            pass
        if cur is not None and l.startswith("node #"):
            cur.append(l)
    return gs, lines
out = {}
for p in sys.argv[1:]:
    gs, lines = graphs(p)
    mx = [l.split("=")[1].strip() for l in lines if "sched_reserve: max_nodes" in l]
    out[p] = {"n_graphs": len(gs), "nodes_per_graph": [len(g) for g in gs],
              "sha": hashlib.sha256("\n".join("\n".join(g) for g in gs).encode()).hexdigest()[:16],
              "max_nodes": mx, "n_sched_reserve": sum("sched_reserve: reserving ..." in l for l in lines),
              "n_graph_reserve": sum(l.startswith("graph_reserve: reserving") for l in lines)}
print(json.dumps(out, indent=1))
