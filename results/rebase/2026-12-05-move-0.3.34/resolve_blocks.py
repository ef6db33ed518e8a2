import re, sys
# resolve conflict blocks: fn(ours, base, theirs, idx) -> text
def resolve(path, fn):
    s = open(path).read()
    pat = re.compile(r'<<<<<<< [^\n]*\n(.*?)\|\|\|\|\|\|\| [^\n]*\n(.*?)=======\n(.*?)>>>>>>> [^\n]*\n', re.S)
    i = [0]
    def rep(m):
        r = fn(m.group(1), m.group(2), m.group(3), i[0]); i[0] += 1; return r
    s2 = pat.sub(rep, s)
    assert '<<<<<<<' not in s2 and '>>>>>>>' not in s2, path
    open(path, 'w').write(s2)
    print(path, i[0], 'blocks')
