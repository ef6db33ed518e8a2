import sys, time, functools, resource
t0 = time.process_time()
import patchctl.cli.main as climain
import patchctl.ops.rebase.rebase as rb
t_import = time.process_time() - t0
acc = {}
def wrap(mod, name):
    f = getattr(mod, name)
    @functools.wraps(f)
    def g(*a, **k):
        s = time.process_time()
        c = resource.getrusage(resource.RUSAGE_CHILDREN)
        try:
            return f(*a, **k)
        finally:
            c2 = resource.getrusage(resource.RUSAGE_CHILDREN)
            e = acc.setdefault(name, [0.0, 0.0])
            e[0] += time.process_time() - s
            e[1] += (c2.ru_utime + c2.ru_stime) - (c.ru_utime + c.ru_stime)
    setattr(mod, name, g)
for n in ["_old_cleanroom", "pin", "new_base", "_start", "_history_evidence", "_advance", "_finish", "_range_diff", "_write_series", "_move_worktree", "_unreproduced_bases", "_old_commits", "_rebase_one", "_merge", "_untouched", "_in_memory", "_record", "regenerated", "misfits"]:
    if hasattr(rb, n):
        wrap(rb, n)
import patchctl.room.rebasestate as rs
wrap(rs, "save"); wrap(rs, "keep_mtimes"); wrap(rs, "stage"); wrap(rs, "keep_old")
try:
    climain.main(sys.argv[1:])
except SystemExit:
    pass
tot = time.process_time() - t0
ch = resource.getrusage(resource.RUSAGE_CHILDREN)
print(f"import {t_import:.3f}  total self {tot:.3f}  children {ch.ru_utime+ch.ru_stime:.3f}", file=sys.stderr)
for k, (a, b) in sorted(acc.items(), key=lambda kv: -kv[1][0]):
    print(f"  {k:22} self {a:.3f}  children {b:.3f}", file=sys.stderr)
