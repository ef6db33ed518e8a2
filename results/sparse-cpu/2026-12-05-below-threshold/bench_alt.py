"""Alternate llama-bench prefills with -sparse 0 / -sparse 1 (ABBA order), recording each process's
command, llama-bench samples, CPU time (user+sys of the child) and the 1-minute load before it."""
import json, os, resource, subprocess, sys, time
bin_, model, out, rounds = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
extra = sys.argv[5:]
rows = []
for r in range(rounds):
    order = (0, 1) if r % 2 == 0 else (1, 0)
    for s in order:
        cmd = [f"{bin_}/llama-bench", "-m", model, "-fa", "1", "-n", "0", "-t", "2", *extra,
               "-sparse", str(s), "-o", "json"]
        load = os.getloadavg()[0]
        r0 = resource.getrusage(resource.RUSAGE_CHILDREN)
        t0 = time.time()
        p = subprocess.run(cmd, capture_output=True, text=True)
        wall = time.time() - t0
        r1 = resource.getrusage(resource.RUSAGE_CHILDREN)
        cpu = (r1.ru_utime - r0.ru_utime) + (r1.ru_stime - r0.ru_stime)
        j = json.loads(p.stdout) if p.returncode == 0 else []
        row = {"round": r, "sparse": s, "rc": p.returncode, "load1_before": round(load, 2),
               "process_wall_s": round(wall, 3), "process_cpu_s": round(cpu, 3),
               "samples_ns": j[0]["samples_ns"] if j else None, "avg_ns": j[0]["avg_ns"] if j else None,
               "command": " ".join(cmd)}
        rows.append(row)
        print(json.dumps({k: row[k] for k in ("round", "sparse", "rc", "load1_before", "process_cpu_s", "samples_ns")}), flush=True)
json.dump(rows, open(out, "w"), indent=1)
