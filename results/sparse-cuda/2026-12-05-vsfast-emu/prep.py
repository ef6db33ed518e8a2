# turn sparse-vs.cu into host C++ for the emulator: drop the CUDA header, rewrite k<<<g, b, s, st>>>(args) launches
import re, sys
src = open(sys.argv[1]).read()
src = src.replace('#include "sparse-vs.cuh"', '#include "shim.h"')
out, i = [], 0
while True:
    m = re.compile(r'(\w+)<<<').search(src, i)
    if not m:
        out.append(src[i:]); break
    out.append(src[i:m.start()])
    j = m.end(); depth = 0; parts = []; cur = ''
    while not (depth == 0 and src.startswith('>>>', j)):
        c = src[j]
        if c in '([': depth += 1
        if c in ')]': depth -= 1
        if c == ',' and depth == 0:
            parts.append(cur); cur = ''
        else:
            cur += c
        j += 1
    parts.append(cur)
    j += 3
    assert src[j] == '(', src[j:j+20]
    out.append('emu_launch(%s, %s, %s, ' % (m.group(1), parts[0].strip(), parts[1].strip()))
    i = j + 1
res = ''.join(out)
# 16-byte accesses go through checks of their alignment (a misaligned uint4 access faults on the GPU, not on x86)
n0 = res.count('*(const uint4 *) ') + res.count('*(uint4 *) ')
res = re.sub(r'\*\(const uint4 \*\) (\([^;]*?\)|\w+);', r'emu_ld16(\1);', res)
res = re.sub(r'\*\(uint4 \*\) (\([^;]*?\)) = ([^;]*);', r'emu_st16(\1, \2);', res)
assert res.count('emu_ld16(') + res.count('emu_st16(') == n0, 'an unhandled 16-byte access'
open(sys.argv[2], 'w').write(res)
