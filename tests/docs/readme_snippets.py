#!/usr/bin/env python3
"""The README's code, checked as written, so it cannot drift from the library: every C++ block
compiles (each inside a function, after a prelude that declares the names the prose leaves to
the reader: the trainer's pointers, `step`, `run_inference`, ...); every C block compiles the same
way against modelcast.h with $CC (cc if unset); every Fortran block compiles
as a program against the built module; every Python block is valid Python. (The daemon's TOML
block is read by modelcastd's own loader in tests/daemon/config_test.cpp.)

usage: readme_snippets.py README.md INCLUDE_DIR GENERATED_INCLUDE_DIR CXX [FORTRAN FORTRAN_MOD_DIR]
Prints one line per block; exits 1 naming the first block (by its README line) that fails."""

import os
import pathlib
import re
import subprocess
import sys
import tempfile

CPP_PRELUDE = """#include <cstdint>
#include <string>
#include <vector>
#include <modelcast/consumer.h>
#include <modelcast/producer.h>
#include <modelcast/sidecar.h>
using namespace modelcast;
// What the README's fragments take from their surroundings.
struct ReadmeParam { std::string name; std::vector<std::int64_t> shape; void* ptr; };
extern std::vector<ReadmeParam> params;
extern float* fc_weight_ptr;
extern std::int64_t step;
extern void* stream;
extern std::string endpoint;
extern modelcast::Producer producer;
void optimizer_step(void* stream);
template <typename T> void run_inference(const T& weights);
"""


C_PRELUDE = """#include <stdint.h>
#include <stdio.h>
#include <modelcast/modelcast.h>
"""


def blocks(text):
    """(language, first line number, code) of every fenced block."""
    out, lines, i = [], text.split("\n"), 0
    while i < len(lines):
        m = re.match(r"^```(\w*)\s*$", lines[i])
        if not m:
            i += 1
            continue
        start, i = i + 1, i + 1
        body = []
        while i < len(lines) and not lines[i].startswith("```"):
            body.append(lines[i])
            i += 1
        out.append((m.group(1), start + 1, "\n".join(body) + "\n"))
        i += 1
    return out


def check_cpp(code, line, work, include, generated, cxx):
    includes = [l for l in code.splitlines() if l.startswith("#include")]
    body = [("// " + l) if l.strip() == "..." else l for l in code.splitlines() if not l.startswith("#include")]
    source = work / f"readme_line{line}.cpp"
    source.write_text(CPP_PRELUDE + "\n".join(includes) + "\nvoid readme_snippet() {\n" + "\n".join(body) + "\n}\n")
    return subprocess.run([cxx, "-std=c++20", "-fsyntax-only", "-I", include, "-I", generated, str(source)],
                          capture_output=True, text=True)


def check_c(code, line, work, include, generated, cc):
    includes = [l for l in code.splitlines() if l.startswith("#include")]
    body = [l for l in code.splitlines() if not l.startswith("#include")]
    source = work / f"readme_line{line}.c"
    source.write_text(C_PRELUDE + "\n".join(includes) + "\nint readme_snippet(void) {\n" + "\n".join(body) + "\nreturn 0;\n}\n")
    return subprocess.run([cc, "-std=c11", "-Wall", "-Werror", "-Wno-unused-variable", "-fsyntax-only", "-I", include,
                           "-I", generated, str(source)], capture_output=True, text=True)


def check_fortran(code, line, work, fortran, mod_dir):
    source = work / f"readme_line{line}.f90"
    source.write_text(f"program readme_line{line}\n" + code + "end program\n")
    return subprocess.run([fortran, "-fsyntax-only", "-I", mod_dir, str(source)], capture_output=True, text=True,
                          cwd=work)


def main(argv):
    readme, include, generated, cxx = argv[1], *(str(pathlib.Path(p).resolve()) for p in argv[2:4]), argv[4]
    fortran, mod_dir = (argv[5], str(pathlib.Path(argv[6]).resolve())) if len(argv) > 6 else (None, None)
    checked = 0
    with tempfile.TemporaryDirectory() as tmp:
        work = pathlib.Path(tmp)
        for language, line, code in blocks(pathlib.Path(readme).read_text()):
            if language == "cpp":
                result = check_cpp(code, line, work, include, generated, cxx)
            elif language == "c":
                result = check_c(code, line, work, include, generated, os.environ.get("CC", "cc"))
            elif language == "fortran" and fortran:
                result = check_fortran(code, line, work, fortran, mod_dir)
            elif language == "python":
                try:
                    compile(code, f"README.md:{line}", "exec")
                    result = subprocess.CompletedProcess([], 0, "", "")
                except SyntaxError as e:
                    result = subprocess.CompletedProcess([], 1, "", str(e))
            else:
                continue
            checked += 1
            if result.returncode != 0:
                print(f"README.md:{line}: the {language} block does not compile as written:\n{result.stderr}")
                return 1
            print(f"README.md:{line}: {language} ok")
    if checked == 0:
        print("no code block found in", readme)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
