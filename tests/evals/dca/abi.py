"""The ABI check of llama-cpp-python's ctypes mirror against the C headers it mirrors.

For every `ctypes.Structure` of `llama_cpp.llama_cpp` whose name is a struct defined in the
headers (llama.h and the ggml headers it includes), a C program generated from the ctypes field
list (an anonymous member stands for its own fields, as in C) prints `sizeof` of the struct and
`offsetof`/`sizeof` of each field BY NAME; it is compiled
against the patched headers and compared with `ctypes.sizeof` and the ctypes fields' offsets and
sizes. The C field names, parsed from the header, must also be the ctypes field names in the same
order: a field dropped at the end can hide in the struct's tail padding, where sizes and offsets
alone would not see it. So adding a C field (e.g. 0078-dca's `dca_mscale`) without its ctypes
mirror fails here, naming the struct and the field.

The ctypes side is read in a separate interpreter that imports `llama_cpp.llama_cpp` alone (the
package's `__init__`, which pulls in the high-level API, is not run), so a mutated copy of the
module can be checked the same way.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

LAYOUT_SCRIPT = r"""
import ctypes, importlib, json, sys, types
package = types.ModuleType("llama_cpp")
package.__path__ = [sys.argv[1]]
sys.modules["llama_cpp"] = package
module = importlib.import_module("llama_cpp.llama_cpp")
aggregate = (ctypes.Structure, ctypes.Union)
layouts = {}
for name, value in vars(module).items():
    if not (isinstance(value, type) and issubclass(value, ctypes.Structure)):
        continue
    if value.__module__ != module.__name__ or value.__name__ != name:
        continue
    fields = []
    for field in value._fields_:
        desc = getattr(value, field[0])
        inner = field[1]
        subs = []
        if isinstance(inner, type) and issubclass(inner, aggregate):
            subs = [(f[0], desc.offset + getattr(inner, f[0]).offset, getattr(inner, f[0]).size)
                    for f in inner._fields_]
        fields.append((field[0], desc.offset, desc.size, subs))
    layouts[name] = {"size": ctypes.sizeof(value), "fields": fields}
print(json.dumps(layouts))
"""

STRUCT = re.compile(r"\bstruct\s+(\w+)\s*\{")
COMMENTS = re.compile(r"//[^\n]*|/\*.*?\*/", re.DOTALL)
FUNC_POINTER = re.compile(r"\(\s*\*\s*(\w+)\s*\)")
DECLARATOR = re.compile(r"(\w+)\s*(?:\[[^\]]*\]\s*)*$")


@dataclass(frozen=True)
class Layout:
    """A struct's size and its fields (name, offset, size) in declaration order."""

    size: int
    fields: tuple[tuple[str, int, int], ...]


@dataclass(frozen=True)
class Mirror:
    """A ctypes struct: its size and fields; a field of struct or union type also lists that
    type's fields at their offsets in the outer struct (C may declare it anonymous)."""

    size: int
    fields: tuple[tuple[str, int, int, tuple[tuple[str, int, int], ...]], ...]

    def as_c(self, c_names: tuple[str, ...] | None) -> Layout:
        """The fields as C names them: a field C does not name, whose type's fields C declares
        (an anonymous union or struct), stands for those fields."""
        flat: list[tuple[str, int, int]] = []
        for name, offset, size, subs in self.fields:
            known = c_names or ()
            anonymous = name not in known and subs and all(sub in known for sub, _o, _s in subs)
            if anonymous:
                flat += subs
            else:
                flat.append((name, offset, size))
        return Layout(self.size, tuple(flat))


def ctypes_layouts(
    package_dir: Path, lib_dir: Path, python: str = sys.executable
) -> dict[str, Mirror]:
    """The Structure classes of `package_dir/llama_cpp.py` (the library loaded from `lib_dir`)."""
    env = {"LLAMA_CPP_LIB_PATH": str(lib_dir), "PATH": "/usr/bin:/bin"}
    proc = subprocess.run(
        [python, "-c", LAYOUT_SCRIPT, str(package_dir)],
        capture_output=True, text=True, check=False, env=env, timeout=120,
    )  # fmt: skip
    if proc.returncode != 0:
        raise RuntimeError(f"importing the ctypes mirror failed:\n{proc.stderr[-3000:]}")
    raw = json.loads(proc.stdout)
    return {
        name: Mirror(
            v["size"],
            tuple((f, o, z, tuple((a, b, c) for a, b, c in subs)) for f, o, z, subs in v["fields"]),
        )
        for name, v in raw.items()
    }


def _body(text: str, start: int) -> str | None:
    """The text between the `{` at `start` and its matching `}` (None: unbalanced)."""
    depth = 0
    for i in range(start, len(text)):
        if text[i] == "{":
            depth += 1
        elif text[i] == "}":
            depth -= 1
            if depth == 0:
                return text[start + 1 : i]
    return None


def _declarations(body: str) -> list[str]:
    """The top-level declarations of a struct body (split at `;` outside nested braces)."""
    parts: list[str] = []
    current: list[str] = []
    depth = 0
    for char in body:
        depth += {"{": 1, "}": -1}.get(char, 0)
        if char == ";" and depth == 0:
            parts.append("".join(current))
            current = []
        else:
            current.append(char)
    return [" ".join(p.split()) for p in parts if p.strip()]


def _field_names(body: str) -> tuple[str, ...] | None:
    """The member names of a struct body in order, an anonymous union's or struct's members in
    its place (None: a declaration that is not understood)."""
    names: list[str] = []
    for declaration in _declarations(COMMENTS.sub(" ", body)):
        if "{" in declaration:
            inner = declaration[declaration.index("{") + 1 : declaration.rindex("}")]
            after = declaration[declaration.rindex("}") + 1 :].strip()
            named = DECLARATOR.search(after) if after else None
            nested = (named.group(1),) if named else None if after else _field_names(inner)
            if nested is None:
                return None
            names += nested
            continue
        pointer = FUNC_POINTER.search(declaration)
        if pointer:
            names.append(pointer.group(1))
            continue
        for part in declaration.split(","):
            match = DECLARATOR.search(part.strip())
            if match is None:
                return None
            names.append(match.group(1))
    return tuple(names)


def c_structs(include_dirs: list[Path]) -> dict[str, tuple[str, ...] | None]:
    """Every struct defined in the headers: its member names (None when not parsed)."""
    found: dict[str, tuple[str, ...] | None] = {}
    for folder in include_dirs:
        for header in sorted(folder.glob("*.h")):
            text = COMMENTS.sub(" ", header.read_text(encoding="utf-8", errors="replace"))
            for match in STRUCT.finditer(text):
                body = _body(text, match.end() - 1)
                if body is not None:
                    found.setdefault(match.group(1), _field_names(body))
    return found


def c_program(layouts: dict[str, Layout]) -> str:
    """C that prints `NAME SIZE` and `NAME.FIELD OFFSET SIZE` for each struct and field."""
    lines = [
        "#include <stddef.h>",
        "#include <stdio.h>",
        '#include "llama.h"',
        "",
        "int main(void) {",
    ]
    for name, layout in sorted(layouts.items()):
        lines.append(f'    printf("{name} %zu\\n", sizeof(struct {name}));')
        for field, _offset, _size in layout.fields:
            lines.append(
                f'    printf("{name}.{field} %zu %zu\\n", offsetof(struct {name}, {field}), '
                f"sizeof(((struct {name} *) 0)->{field}));"
            )
    return "\n".join([*lines, "    return 0;", "}", ""])


def c_layouts(
    source: str, include_dirs: list[Path], work: Path, cc: str = "cc"
) -> dict[str, Layout]:
    """Compile and run the generated program (a compile error names the missing field)."""
    work.mkdir(parents=True, exist_ok=True)
    (work / "abi.c").write_text(source)
    includes = [f"-I{d}" for d in include_dirs]
    cmd = [cc, "-std=c11", "-Wall", *includes, str(work / "abi.c"), "-o", str(work / "abi")]
    built = subprocess.run(cmd, capture_output=True, text=True, check=False)
    if built.returncode != 0:
        raise AbiMismatch([f"the C program does not compile:\n{built.stderr[-3000:]}"])
    ran = subprocess.run([str(work / "abi")], capture_output=True, text=True, check=True)
    sizes: dict[str, int] = {}
    fields: dict[str, list[tuple[str, int, int]]] = {}
    for line in ran.stdout.splitlines():
        key, *numbers = line.split()
        if "." in key:
            struct, field = key.split(".", 1)
            fields.setdefault(struct, []).append((field, int(numbers[0]), int(numbers[1])))
        else:
            sizes[key] = int(numbers[0])
    return {name: Layout(size, tuple(fields.get(name, []))) for name, size in sizes.items()}


class AbiMismatch(AssertionError):
    """The ctypes mirror and the C headers disagree: one line per difference."""

    def __init__(self, problems: list[str]) -> None:
        super().__init__("\n".join(problems))
        self.problems = problems


@dataclass(frozen=True)
class AbiReport:
    """What the check compared."""

    checked: dict[str, Layout]  # the ctypes layouts that were compared with C
    unmatched: tuple[str, ...]  # ctypes structs with no struct of that name in the headers


def compare(
    mirror: dict[str, Layout], c: dict[str, Layout], names: dict[str, tuple[str, ...] | None]
) -> list[str]:
    """Every difference between the ctypes layouts (as C names their fields) and the C ones."""
    problems = []
    for struct, py in sorted(mirror.items()):
        native = c[struct]
        if py.size != native.size:
            problems.append(f"{struct}: ctypes.sizeof {py.size} != C sizeof {native.size}")
        for (field, offset, size), (_f, c_offset, c_size) in zip(
            py.fields, native.fields, strict=True
        ):
            if (offset, size) != (c_offset, c_size):
                problems.append(
                    f"{struct}.{field}: ctypes offset {offset} size {size} != C offset {c_offset} "
                    f"size {c_size}"
                )
        declared = names.get(struct)
        mirrored = tuple(f for f, _o, _s in py.fields)
        if declared is not None and declared != mirrored:
            problems.append(f"{struct}: C fields {declared} != ctypes fields {mirrored}")
    return problems


def check(package_dir: Path, lib_dir: Path, include_dirs: list[Path], work: Path) -> AbiReport:
    """AbiMismatch unless every mirrored struct matches C; the report of what was compared."""
    structs = c_structs(include_dirs)
    mirror = ctypes_layouts(package_dir, lib_dir)
    checked = {k: v.as_c(structs[k]) for k, v in mirror.items() if k in structs}
    unmatched = tuple(sorted(set(mirror) - set(checked)))
    native = c_layouts(c_program(checked), include_dirs, work)
    problems = compare(checked, native, structs)
    if problems:
        raise AbiMismatch(problems)
    return AbiReport(checked, unmatched)
