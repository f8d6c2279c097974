#!/usr/bin/env python3
"""Runs the command lines that the docs show, literally, against a built tree ("documented means tested").

Every line of every ```sh block in README.md, docs/*.md and examples/*/README.md (continuation lines joined,
comments dropped) must match one rule of RULES below, which says what to do with it:
  run    run it with bash in the sandbox; it must exit 0 within its timeout
  start  run it until its first progress line ("epoch N step M"), then send SIGTERM (the preemption path:
         the job checkpoints and exits 75) — it must show that line and exit 0 or 75; for long trainings
  skip   not run here, for the reason given (a GPU, a second host, Slurm, or a test that covers it)
A documented command that no rule matches fails the test: a new command gets a rule (and so a decision).
Rules are tried in order; the first match wins. OUTPUT_CHECKS then read the output of the commands that ran, for
what a zero exit status cannot show (a message contradicting itself or another command's help).

Besides the commands, the docs are checked against the build where a file or a command shows the truth
(consistency checks): the README's config key list names every key `dtrain config show --defaults` prints, and its
`dtrain launch` flags are the ones `dtrain launch --help` lists; every
RUN line of the Dockerfile calls only scripts that CI itself runs (scripts/run.sh or scripts/test.sh call them), so
the image recipe cannot drift from the tested one (no registry or Docker daemon in CI: the file is checked, not an
image); and the Kubernetes example's pods run the image its README builds with a config and --set values that
`dtrain config show` accepts.

Commands run in document order in one sandbox directory: the repository's configs/, examples/, scripts/ and
bench/ linked in, `build` linked to the build under test (so `build/dtrain` works), that build directory first
on PATH (so `dtrain` works, as after `export PATH=$PWD/build:$PATH`), HOME set to a fresh directory, an
input.txt of plain text and a train.bin of uint16 tokens for the data examples. Nothing is written to the
repository.

usage: tests/docs/readme_commands_test.py SOURCE_DIR BUILD_DIR [--only REGEX] [--list]
Exit status 0 when every command behaved as its rule says.
"""
import glob
import os
import re
import shutil
import signal
import struct
import subprocess
import sys
import tempfile
import time

GPU = "needs a GPU"
HOSTS = "needs other hosts (tests/launcher/multinode_netns_test.cc runs a two-host launch on netns hosts)"
SLURM = "needs a Slurm cluster (tests/launcher/slurm_e2e_test.cc runs these against real Slurm daemons)"
PER_NODE = ("needs other hosts with GPUs, or Kubernetes (tests/launcher/per_node_e2e_test.cc runs two per-node "
            "launchers on loopback)")
INSTALL = "installs dtrain and builds a project against it (tests/launcher/custom_model_e2e_test.cc does both)"

# (regex over the joined command, action, timeout seconds or skip reason)
RULES = [
    (r"^scripts/run\.sh", "skip", "CI runs it as its own stage (scripts/test.sh main)"),
    (r"^scripts/test\.sh", "skip", "this test is part of it"),
    (r"^scripts/install_deps\.sh", "skip", "installs packages (every CI stage starts with it)"),
    (r"^scripts/build\.sh", "skip", "the build under test was made by it"),
    (r"^scripts/netns_cluster\.sh|--hosts 10\.77\.", "skip", HOSTS),
    (r"examples/spot/replay_trace\.sh", "skip",
     "network-namespace hosts, minutes of training (tests/launcher/elastic_netns_test.cc runs the same losses)"),
    (r"--dry-run", "run", 60),
    (r"--hosts|--hostfile", "skip", HOSTS),
    (r"--node-rank|(^|&& |\| )kubectl ", "skip", PER_NODE),
    (r"^docker ", "skip", "needs Docker and a registry (check_dockerfile checks the Dockerfile's RUN lines instead)"),
    (r"^openssl rand -hex 32 > secret && chmod 600 secret$", "run", 30),
    (r"--nproc-per-node gpu", "skip", GPU),
    (r"^(\w+=\S+ )*bench/(device_session|allreduce|hf_parity)\.sh", "skip", GPU + " (the benchmark machine)"),
    (r"configs/(smollm2_360m|llama3_1b|llama3_3b|llama3_8b)\.yaml", "skip", GPU + " (bf16 Llama shapes of 360M to 8B parameters)"),
    (r"^mpirun -np 2 build/dtrain bench allreduce --max-bytes 1G", "skip",
     "sized for GPUs: up to 1 GiB on 2 CPU ranks takes ~3 minutes here (tests/launcher/bench_allreduce_test.cc "
     "runs `mpirun -np 2 dtrain bench allreduce` with small sizes)"),
    (r"examples/spot/fashion_mnist_spot\.yaml --grace-seconds", "skip",
     "needs an S3 bucket and credentials (tests/launcher/s3_checkpoint_e2e_test.cc trains to a real Ceph RGW)"),
    (r"srun|sbatch|squeue|slurm_test_cluster|SLURM_CONF", "skip", SLURM),
    (r"^cmake |build-custom/custom_trainer", "skip", INSTALL),
    (r"^curl -s http://127\.0\.0\.1:\d+/metrics$", "skip",
     "reads a running job's endpoint (tests/runtime/train/prometheus_feed_e2e_test.cc scrapes a real 2-rank run "
     "with Prometheus)"),
    (r"--tokenizer gpt2/tokenizer\.json", "skip",
     "needs GPT-2's tokenizer.json from the Hugging Face hub (ctest data_gpt2_bpe_reference checks the same BPE "
     "token for token with GPT-2's real files from npm)"),
    (r"^(build/)?dtrain doctor", "run", 120),
    (r"^source <\(dtrain completion bash\)$", "run", 30),
    (r"^dtrain completion bash > /etc/", "skip", "writes a system file (the line above runs the same generator)"),
    (r"^(build/)?dtrain (train|launch) ", "start", 300),
    (r"^examples/spot/simulate_preemptions\.sh", "run", 300),
    (r"^(build/)?dtrain (data|ckpt|report|config|completion|version)\b", "run", 180),
]

PROGRESS = re.compile(r"epoch \d+/\d+ step \d+")


def dtrain_output(env, *args):
    dtrain = shutil.which("dtrain", path=env["PATH"]) or "dtrain"
    return subprocess.run([dtrain, *args], env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                          errors="replace", timeout=60).stdout


def doctor_agrees_with_itself(output, env):
    text = "".join(output)
    if "no NVIDIA driver loaded" in text and "insufficient" in text:
        return "says there is no NVIDIA driver, and that the driver's version is insufficient"
    return None


def report_hours_in_help(output, env):
    rows = [line.split()[0] for line in output if re.match(r"\s+(GPU|rank)-hours\s", line)]
    if not rows:
        return "no GPU-hours or rank-hours row in the summary"
    help_text = dtrain_output(env, "report", "--help")
    missing = [r for r in rows if r not in help_text]
    return f"prints {missing[0]}, which `dtrain report --help` never names" if missing else None


# (regex over the joined command, check(output lines, env) -> None or what is wrong), for commands that ran.
OUTPUT_CHECKS = [
    (r"^(build/)?dtrain doctor", doctor_agrees_with_itself),
    (r"^dtrain report ", report_hours_in_help),
]


def parenthesized_after(text, head):
    """The text inside the parentheses that follow `head` in `text` (nested ones kept), or None."""
    at = text.find(head + " (")
    if at < 0:
        return None
    depth, start = 0, at + len(head) + 1
    for i in range(start, len(text)):
        depth += {"(": 1, ")": -1}.get(text[i], 0)
        if depth == 0:
            return text[start + 1:i]
    return None


def check_config_key_list(source, env):
    """The README's "Sections and their keys" paragraph names every key of `dtrain config show --defaults` (model:
    its own keys and sub-sections, not the shapes inside them)."""
    readme = open(os.path.join(source, "README.md")).read()
    at = readme.find("Sections and their keys")
    if at < 0:
        return ["README.md: no \"Sections and their keys\" paragraph"]
    para = " ".join(readme[at:readme.find("\n\n", at)].split())
    errors, path = [], []
    for line in dtrain_output(env, "config", "show", "--defaults").splitlines():
        m = re.match(r"^( *)(\w+):", line)
        if not m:
            continue
        depth = len(m.group(1)) // 2
        path = path[:depth] + [m.group(2)]
        if depth == 0 or (path[0] == "model" and depth > 1):
            continue
        listed = parenthesized_after(para, f"`{path[0]}`")
        if listed is None:
            errors.append(f"README.md: the config key list has no section `{path[0]}`")
        elif not re.search(r"(?<![\w.])" + path[-1] + r"(?![\w])", listed):
            errors.append(f"README.md: the config key list does not name {'.'.join(path)}")
    return sorted(set(errors)) if path else ["`dtrain config show --defaults` printed no keys"]


def check_launch_flags(source, env):
    """The README's `dtrain launch` flags (its flag table and the torchrun spellings it says launch accepts) are
    exactly the names `dtrain launch --help` lists: none documented that the parser lacks, none the parser takes
    that the README leaves out or says do not exist."""
    readme = open(os.path.join(source, "README.md")).read()
    table = readme[readme.find("`dtrain launch`'s flags"):]
    table = "\n".join(line for line in table[:table.find("\n\n", table.find("| ---"))].splitlines()
                      if line.startswith("| `-"))
    at = readme.find("`launch` also accepts torchrun's spellings")
    torchrun = readme[at:readme.find("is spelled the same", at)] if at >= 0 else ""
    documented = set(re.findall(r"--[a-z][\w-]*", table + " " + torchrun))
    helped = set()  # the option column: "  --node-rank,--node_rank R   per-node start ..."
    for line in dtrain_output(env, "launch", "--help").splitlines():
        if line.startswith("  -"):
            helped.update(n for n in line.split()[0].split(",") if n.startswith("--") and n != "--help")
    errors = []
    if not table or not torchrun:
        errors.append("README.md: no `dtrain launch` flag table or torchrun spellings sentence found")
    for flag in sorted(documented - helped):
        errors.append(f"README.md: documents `dtrain launch {flag}`, which `dtrain launch --help` does not list")
    for flag in sorted(helped - documented):
        errors.append(f"README.md: `dtrain launch --help` lists {flag}, which the README's flag table and torchrun "
                      "spellings leave out")
    return errors


def check_k8s_example(source, env):
    """examples/k8s/indexed_job.yaml runs as written: the image is the one its README builds, and the dtrain command
    of its pods (their variables filled in from the manifest, as the shell in the pod fills them) names a config the
    image holds whose --set overrides `dtrain config show` accepts."""
    manifest = os.path.join(source, "examples", "k8s", "indexed_job.yaml")
    text = open(manifest).read()
    errors = []
    images = re.findall(r"^\s*image:\s*(\S+)", text, re.M)
    readme = open(os.path.join(source, "examples", "k8s", "README.md")).read()
    built = re.findall(r"docker build -t (\S+) ", readme)
    if len(images) != 1 or images[0] not in built:
        errors.append(f"examples/k8s: the manifest's image {images} is not the one its README builds {built}")
    variables = dict(re.findall(r"\{name: (\w+), value: \"?([^\"}]*?)\"?\}", text))
    variables["JOB_COMPLETION_INDEX"] = "0"
    folded = re.search(r"- >-\n((?:\s{14,}.*\n)+)", text)
    if folded is None:
        return errors + ["examples/k8s/indexed_job.yaml: no folded `args` command (- >-) found"]
    command = re.sub(r"\$(\w+)", lambda m: variables.get(m.group(1), m.group(0)), " ".join(folded.group(1).split()))
    words = command.split()
    if words[:3] != ["exec", "dtrain", "launch"] or "$" in command:
        return errors + [f"examples/k8s/indexed_job.yaml: expected `exec dtrain launch ...` with every variable "
                         f"set in the manifest, got `{command}`"]
    config = next((w for w in words if w.startswith("configs/") and w.endswith(".yaml")), None)
    sets = [w for i, w in enumerate(words) if i > 0 and words[i - 1] == "--set"]
    if config is None or not os.path.isfile(os.path.join(source, config)):
        return errors + [f"examples/k8s/indexed_job.yaml: the config {config} is not in configs/ (the image's copy)"]
    shown = subprocess.run([shutil.which("dtrain", path=env["PATH"]) or "dtrain", "config", "show",
                            os.path.join(source, config)] + [a for kv in sets for a in ("--set", kv)], env=env,
                           stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=60)
    if shown.returncode != 0:
        errors.append(f"examples/k8s/indexed_job.yaml: `dtrain config show {config}` with the pods' --set values "
                      f"exits {shown.returncode}: {shown.stdout.strip()[-300:]}")
    return errors


def check_dockerfile(source):
    """Every RUN line of the Dockerfile runs only scripts/*.sh that CI runs (named in scripts/run.sh or
    scripts/test.sh); the image is built on NVIDIA's devel image and shipped on its runtime image."""
    import shlex
    ci = open(os.path.join(source, "scripts", "run.sh")).read() + open(os.path.join(source, "scripts", "test.sh")).read()
    errors, froms, runs, pending = [], [], 0, ""
    for lineno, line in enumerate(open(os.path.join(source, "Dockerfile")), 1):
        line = pending + line.rstrip("\n")
        if line.endswith("\\"):
            pending = line[:-1] + " "
            continue
        pending = ""
        words = line.split(None, 1)
        if not words or words[0].startswith("#"):
            continue
        if words[0].upper() == "FROM":
            froms.append(words[1])
        if words[0].upper() != "RUN":
            continue
        runs += 1
        lexer = shlex.shlex(words[1] if len(words) > 1 else "", posix=True, punctuation_chars=True)
        command = []
        for token in list(lexer) + [";"]:
            if token not in ("&&", "||", ";", "|", "&"):
                command.append(token)
                continue
            program = next((w for w in command if not re.match(r"^\w+=", w)), None)
            if program is None or not re.fullmatch(r"scripts/[\w.-]+\.sh", program):
                errors.append(f"Dockerfile:{lineno}: RUN runs `{program}`, not one of the scripts CI runs")
            elif program not in ci:
                errors.append(f"Dockerfile:{lineno}: RUN runs {program}, which neither scripts/run.sh nor "
                              "scripts/test.sh runs")
            command = []
    if runs == 0:
        errors.append("Dockerfile: no RUN line")
    if len(froms) < 2 or "-devel-" not in froms[0] or "-runtime-" not in froms[-1]:
        errors.append(f"Dockerfile: expected a build stage FROM NVIDIA's CUDA devel image and the image FROM its "
                      f"runtime image, found FROM {froms}")
    return errors


def documented_commands(source):
    files = [os.path.join(source, "README.md")] + sorted(glob.glob(os.path.join(source, "docs", "*.md"))) + \
        sorted(glob.glob(os.path.join(source, "examples", "*", "README.md")))
    out = []
    for path in files:
        in_block, pending = False, ""
        for lineno, line in enumerate(open(path), 1):
            if line.startswith("```"):
                in_block = line.strip() in ("```sh", "```bash")
                continue
            if not in_block:
                continue
            text = line.rstrip("\n")
            # A trailing "# comment" after two spaces (the docs' style); a leading # is a comment line.
            text = re.sub(r"\s{2,}#.*$", "", text).strip()
            if not text or text.startswith("#"):
                continue
            if text.endswith("\\"):
                pending += text[:-1] + " "
                continue
            out.append((os.path.relpath(path, source), lineno, pending + text))
            pending = ""
    return out


def make_sandbox(source, build):
    box = tempfile.mkdtemp(prefix="dtrain_docs_")
    for name in ("configs", "examples", "scripts", "bench"):
        os.symlink(os.path.join(source, name), os.path.join(box, name))
    os.symlink(os.path.abspath(build), os.path.join(box, "build"))
    os.makedirs(os.path.join(box, "home"))
    # Plain text for `dtrain data convert-text ... input.txt`: the licenses every Debian system ships.
    with open(os.path.join(box, "input.txt"), "w") as f:
        for p in sorted(glob.glob("/usr/share/common-licenses/*")):
            if os.path.isfile(p):
                f.write(open(p, errors="replace").read())
    # nanoGPT-style token file for `dtrain data import-tokens ... train.bin`: the text's bytes as uint16 ids.
    text = open(os.path.join(box, "input.txt"), "rb").read()
    with open(os.path.join(box, "train.bin"), "wb") as f:
        f.write(struct.pack("<%dH" % len(text), *text))
    env = dict(os.environ)
    env.update(PATH=os.path.abspath(build) + ":" + env.get("PATH", ""), HOME=os.path.join(box, "home"),
               OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1",
               OMPI_MCA_rmaps_base_oversubscribe="1")
    return box, env


def run(cmd, box, env, action, timeout):
    """Returns (ok, detail)."""
    start = time.time()
    proc = subprocess.Popen(["bash", "-c", cmd], cwd=box, env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True, errors="replace", start_new_session=True)
    lines, saw_progress, stopped = [], False, False
    try:
        for line in proc.stdout:
            lines.append(line)
            if action == "start" and not stopped and PROGRESS.search(line):
                saw_progress, stopped = True, True
                os.killpg(proc.pid, signal.SIGTERM)
            if time.time() - start > timeout:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
                return False, f"still running after {timeout} s", lines
        rc = proc.wait(timeout=max(1, timeout - (time.time() - start)))
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
        return False, f"still running after {timeout} s", lines
    took = f"{time.time() - start:.1f} s"
    if action == "start":
        if rc == 0:
            return True, f"finished (exit 0) in {took}", lines
        if saw_progress and rc == 75:
            return True, f"trained, then checkpointed on SIGTERM (exit 75) in {took}", lines
        return False, f"exit {rc} after {took}" + ("" if saw_progress else ", no progress line"), lines
    return rc == 0, f"exit {rc} in {took}", lines


def main(argv):
    args = [a for a in argv[1:] if not a.startswith("--")]
    only = None
    if "--only" in argv:
        only = re.compile(argv[argv.index("--only") + 1])
        args = [a for a in args if a != argv[argv.index("--only") + 1]]
    if len(args) != 2:
        print(__doc__.strip().splitlines()[-2], file=sys.stderr)
        return 2
    source, build = (os.path.abspath(a) for a in args)
    if not os.access(os.path.join(build, "dtrain"), os.X_OK):
        print(f"readme_commands: no dtrain binary at {build}/dtrain", file=sys.stderr)
        return 1
    commands = documented_commands(source)
    box, env = make_sandbox(source, build)
    failures, counts = [], {"run": 0, "start": 0, "skip": 0}
    if "--list" not in argv:
        consistency = (check_config_key_list(source, env) + check_launch_flags(source, env) +
                       check_dockerfile(source) + check_k8s_example(source, env))
        for c in consistency:
            print(f"FAIL  {c}")
        print(f"consistency: config keys, launch flags, the Dockerfile, the Kubernetes example: {len(consistency)} "
              "problem(s)")
        failures += consistency
    try:
        for doc, lineno, cmd in commands:
            where = f"{doc}:{lineno}"
            rule = next((r for r in RULES if re.search(r[0], cmd)), None)
            if rule is None:
                failures.append(f"{where}: no rule for documented command `{cmd}` (add one to RULES)")
                print(f"UNCLASSIFIED {where}: {cmd}")
                continue
            _, action, arg = rule
            if "--list" in argv or (only and not only.search(cmd)) or action == "skip":
                counts["skip"] += 1
                print(f"skip  {where}: {cmd}\n      ({arg if action == 'skip' else 'not selected'})")
                continue
            ok, detail, output = run(cmd, box, env, action, arg)
            for pattern, check in OUTPUT_CHECKS:
                wrong = check(output, env) if ok and re.search(pattern, cmd) else None
                if wrong:
                    ok, detail = False, f"{detail}, but its output {wrong}"
            counts[action] += 1
            print(f"{'ok   ' if ok else 'FAIL '} {where}: {cmd}\n      {action}: {detail}")
            if not ok:
                failures.append(f"{where}: `{cmd}`: {detail}")
                print("      last output:\n" + "".join("        " + l for l in output[-15:]))
    finally:
        shutil.rmtree(box, ignore_errors=True)
    print(f"readme_commands: {len(commands)} documented commands: {counts['run']} run, {counts['start']} started, "
          f"{counts['skip']} skipped, {len(failures)} failed")
    for f in failures:
        print("  " + f)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
