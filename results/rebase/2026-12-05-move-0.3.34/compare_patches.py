import sys, re, difflib
def split(p):
    files={}; cur=None
    for l in open(p).read().split('\n'):
        m=re.match(r'^diff --git a/(\S+) b/(\S+)', l)
        if m: cur=m.group(2); files[cur]=[]; continue
        if cur and (l.startswith('+') or l.startswith('-')) and not l.startswith('+++') and not l.startswith('---'):
            files[cur].append(l)
    return files
a=split(sys.argv[1]); b=split(sys.argv[2])
for f in sorted(set(a)|set(b)):
    if a.get(f)!=b.get(f):
        print('=== FILE', f, 'here' if f in a else '-', 'ref' if f in b else '-')
        for l in difflib.unified_diff(b.get(f,[]), a.get(f,[]), 'ref(0.3.35)', 'here', n=2, lineterm=''):
            print(l)
