#!/usr/bin/env python3
"""Mutation check: each mutant of tests/mutants.json (one small change to the code, the kind of bug a
careful reviewer could miss) is applied alone, the test binaries it names are rebuilt and run, and the
file is restored. A mutant the tests do not catch is a test gap (or an equivalent change: say so in its
`why`). Before a release, or after changing what a mutant's tests cover; each takes 15-180 s on 2 cores.

  scripts/mutants.py                      # every mutant
  scripts/mutants.py causal_leak ...      # the ones named
Exit status: 0 when every mutant was caught, 1 when one survived, 2 when one no longer applies (its
`old` text is not in its file exactly once: update the catalogue).
"""
import json
import os
import subprocess
import sys
import time

root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
build = os.environ.get("BUILD_DIR", "build")


def rebuild(targets):
    r = subprocess.run(["cmake", "--build", build, "--target", *targets], cwd=root, capture_output=True, text=True)
    return r.returncode == 0, r.stdout[-600:] + r.stderr[-600:]


def main():
    catalogue = json.load(open(os.path.join(root, "tests", "mutants.json")))
    wanted = set(sys.argv[1:])
    unknown = wanted - {m["id"] for m in catalogue}
    if unknown:
        sys.exit("mutants: no such mutant: " + ", ".join(sorted(unknown)))
    if not os.path.exists(os.path.join(root, build, "build.ninja")):
        subprocess.run(["scripts/setup.sh"], cwd=root, check=True)
    survived, stale = [], []
    for m in catalogue:
        if wanted and m["id"] not in wanted:
            continue
        path = os.path.join(root, m["file"])
        with open(path) as f:
            src = f.read()
        if src.count(m["old"]) != 1:
            print(f"{m['id']}: STALE: its text occurs {src.count(m['old'])} times in {m['file']}", flush=True)
            stale.append(m["id"])
            continue
        tests = m["tests"]
        targets = sorted({t.split()[0].split("/")[-1] for t in tests} | set(m.get("targets", [])))
        t0 = time.time()
        try:
            with open(path, "w") as f:
                f.write(src.replace(m["old"], m["new"]))
            ok, log = rebuild(targets)
            if not ok:
                print(f"{m['id']}: caught by the build\n{log}", flush=True)
                continue
            caught = []
            for t in tests:
                words = t.split()
                r = subprocess.run([os.path.join(build, words[0]), *words[1:]], cwd=root, capture_output=True,
                                   text=True, timeout=1800)
                if "No test cases matched" in r.stdout + r.stderr:  # a filter that runs nothing proves nothing
                    print(f"{m['id']}: STALE: '{t}' matches no test (filters split at spaces; wildcards only at the ends)", flush=True)
                    stale.append(m["id"])
                elif r.returncode not in (0, 77):  # 77: passed with skips
                    caught.append(words[0])
            verdict = "caught by " + ", ".join(caught) if caught else "SURVIVED"
            print(f"{m['id']} ({time.time() - t0:.0f} s): {verdict}  [{m['what']}]", flush=True)
            if not caught and m["id"] not in stale:
                survived.append(m["id"])
        finally:
            with open(path, "w") as f:
                f.write(src)
    rebuild(["all"])
    if stale:
        print("mutants: stale: " + ", ".join(stale))
    if survived:
        print("mutants: survived: " + ", ".join(survived))
    sys.exit(2 if stale else 1 if survived else 0)


if __name__ == "__main__":
    main()
