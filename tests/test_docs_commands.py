"""Docs that run: every command README.md and docs/*.md show (in sh/console blocks, and inline code that
starts with one of our commands and has arguments) is parsed by the program it names, usage lines
included ("[--opt ARG]" tried without and with each optional part, "a|b" each way, placeholders given
values); the README's "try it" block is run as printed. A command no rule here knows fails the test,
so a new kind of command in the docs gets a check too.

What runs where:
- namesrv-admin, twistd namesrv / twisted-namesrv / python -m twisted_namesrv / tools/run-server.sh,
  twistd namesrv-controller, python -m spark_analysis: their own parsers (argparse, twisted's usage);
- tools/*.py: run up to their argument parsing (argparse's parse_args, then exit);
- tools/*.sh: each option shown is one the script handles;
- curl, chromium (the page's screenshot): the path is served by a live server (not 404);
- promtool: run (deploy/monitoring's checks);
- podman, kubectl, systemctl, spark-submit and the install steps: the image, file and unit they name
  exist (tests/test_container.py runs docs/deploy.md's podman commands as printed, tests/test_systemd.py
  the unit, tests/test_deploy.py the manifests);
- README's quick start: run as printed in a network namespace of its own (ports 9876/9877 as shown).
"""

from __future__ import annotations

import contextlib
import io
import itertools
import os
import re
import shlex
import shutil
import subprocess
import sys
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from twisted_namesrv import __version__
from twisted_namesrv.schema import SERVER_SCHEMA

REPO = Path(__file__).resolve().parents[1]
PAGES = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]
VENV_BIN = Path(sys.executable).parent
IMAGE = f"localhost/twisted-namesrv:{__version__}"
FENCE = re.compile(r"^```(\w*)\n(.*?)^```", re.M | re.S)
PROGRAMS = ("namesrv-admin", "twisted-namesrv", "twistd", "python", "python3", "curl", "podman", "kubectl",
            "systemctl", "spark-submit", "install", "cp", "promtool", "chromium")
#: values for the placeholders of usage lines
VALUES = {
    "NS": "NS", "K": "key", "V": "value", "KEY": "key", "VALUE": "value", "T": "TopicTest", "CLUSTER": "DefaultCluster",
    "BROKER": "broker-a", "B": "broker-a", "NAME": "broker-a", "N": "2", "ID": "1", "S": "60", "P": "9876",
    "C": "9878", "PORT": "9876", "HOST": "127.0.0.1", "ADDR": "127.0.0.1", "NS1": "127.0.0.1:9876",
    "NS2": "127.0.0.1:9877", "CONTROLLER": "127.0.0.1:9878", "A,B": "TopicA,TopicB", "MODE": "permissive",
    "SIZE": "2g", "LEVEL": "WARN", "KEY=VALUE": "spark.ui.enabled=false", "IMAGE": "debian:bookworm",
    "HOST:PORT;...": "127.0.0.1:9876;127.0.0.1:9877", "NAMESRV": "127.0.0.1:9876",
}
FILES = ("DIR", "PATH", "FILE", "PEM", "INPUT")  # placeholders for a path: a file that exists


# -- reading the docs ------------------------------------------------------------------------------

def logical_lines(block: str, console: bool) -> list[str]:
    """A block's commands: continuation lines joined (a trailing backslash, or an indented line
    wrapping a usage), console output left out, comments dropped."""
    lines, current = [], ""
    for raw in block.splitlines():
        if not console and raw.startswith((" ", "\t")) and lines and not current:
            lines[-1] = strip_comment(lines[-1]) + " " + raw.strip()
            continue
        if console and not current:
            if not raw.startswith("$ "):
                continue
            raw = raw[2:]
        current += raw.rstrip("\\").rstrip() + " " if raw.endswith("\\") else raw
        if not raw.endswith("\\"):
            lines.append(current)
            current = ""
    return [line for line in (strip_comment(line) for line in lines) if line and not line.startswith("#")]


def strip_comment(line: str) -> str:
    """The line without a trailing `# comment` (a # outside quotes, after a space)."""
    quote = None
    for i, char in enumerate(line):
        if char in "'\"" and quote in (None, char):
            quote = None if quote else char
        elif char == "#" and quote is None and (i == 0 or line[i - 1] == " "):
            return line[:i].strip()
    return line.strip()


def split_commands(line: str) -> list[str]:
    """`a; b`, `a && b`, and two usage lines side by side (`namesrv-admin x     namesrv-admin y`)."""
    parts = re.split(r"\s*(?:;|&&)\s+|\s{2,}(?=namesrv-admin )", line)
    return [part.strip() for part in parts if part.strip()]


def documented_commands() -> list[tuple[str, str, bool]]:
    """(page, command, whether it is only mentioned in prose) for every command the docs show."""
    found = []
    for page in PAGES:
        text = page.read_text(encoding="utf-8")
        for lang, block in FENCE.findall(text):
            if lang in ("sh", "bash", "console", "shell"):
                console = lang == "console" or block.startswith("$ ")
                for line in logical_lines(block, console):
                    found += [(page.name, command, False) for command in split_commands(line)]
        prose = FENCE.sub("", text)
        for span in re.findall(r"`([^`\n]+)`", prose):
            words = span.split()
            program = words[0].removeprefix(".venv/bin/")
            if len(words) > 1 and (program in PROGRAMS[:3] or program.startswith("tools/")
                                   or span.startswith(("python -m twisted_namesrv", "python -m spark_analysis"))):
                if re.match(r"twisted-namesrv \d", span):
                    continue  # a version line the docs quote, not a command
                found.append((page.name, span, True))
    return found


# -- usage lines to concrete argument lists -----------------------------------------------------

def groups(words: list[str]) -> tuple[list[str], list[list[str]]]:
    """Usage words: the fixed ones, and each optional [group] (nested brackets flattened)."""
    fixed, optional, depth, current = [], [], 0, []
    for word in words:
        outer = re.sub(r"(?<=\w)\[[^\[\]]*\]", "", word)  # local[*] is a value, not an optional part
        opens, closes = len(outer) - len(outer.lstrip("[")), len(outer) - len(outer.rstrip("]"))
        bare = word[opens:len(word) - closes]
        if depth == 0 and opens == 0:
            fixed.append(bare)
        else:
            if bare:
                current.append(bare)
            depth += opens - closes
            if depth == 0:
                optional.append(current)
                current = []
    return fixed, [g for g in optional if g and g != ["..."] and g[0].startswith("-")]  # [pytest options]: prose


def concrete(words: list[str], tmp: Path, together: bool = False) -> list[list[str]]:
    """Argument lists for a usage: the fixed words, then each optional group alone (``together``: all
    of them in one, for the tools, whose start is slow); `a|b` both ways."""
    fixed, optional = groups(words)
    variants = [fixed + [word for group in optional for word in group]] if together else \
        [fixed] + [fixed + group for group in optional]
    out = []
    for variant in variants:
        choices = [word.split("|") if "|" in word and not word.startswith("'") else [word] for word in variant]
        for combination in itertools.product(*choices):
            out.append([value(word, tmp) for word in combination if word not in ("...", "…")])
    return out


def value(word: str, tmp: Path) -> str:
    word = word.replace("spark://…", "spark://127.0.0.1:7077")
    if word in VALUES:
        return VALUES[word]
    if "*" in word and "[" not in word:  # a glob the operator's shell expands: one file it matches
        word = "FILE"
    if word.rstrip(".") in FILES or word in FILES:
        path = tmp / word.rstrip(".").lower()
        path.touch()
        return str(path)
    return word


# -- the checks, by program -----------------------------------------------------------------------

def parse_admin(args: list[str]) -> str | None:
    from twisted_namesrv.admin.cli import build_parser

    return parsed_by(lambda: build_parser().parse_args(args))


def parse_server(args: list[str], tmp: Path) -> str | None:
    from twisted_namesrv import tap

    os.chdir(tmp)  # -c namesrv.properties and friends, relative to where the operator stands
    (tmp / "namesrv.properties").touch()
    return parsed_by(lambda: tap.Options().parseOptions(args))


def parse_controller(args: list[str], tmp: Path) -> str | None:
    from twisted_namesrv.controller import tap

    (tmp / "file").write_text(f"controllerDLegerPeers=n0-127.0.0.1:9878\ncontrollerStorePath={tmp}/store\n")
    return parsed_by(lambda: tap.Options().parseOptions(args))


def parse_spark(args: list[str]) -> str | None:
    from spark_analysis.__main__ import _parser

    return parsed_by(lambda: _parser().parse_args(args))


def parsed_by(parse) -> str | None:
    """None when the parser takes it (an exit 0 of --version, -p or --help too), else what it said."""
    err = io.StringIO()
    try:
        with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
            parse()
    except SystemExit as exc:
        return None if exc.code in (0, None) else err.getvalue() or f"exit {exc.code}"
    except Exception as exc:  # usage.UsageError and the config's own errors
        return f"{type(exc).__name__}: {exc}"
    return None


#: runs a tool script up to its argparse parse (parse_args, or a top-level parse_known_args), then
#: exits 0 ("PARSED") before it does anything; a usage error exits 2
INTERCEPT = """
import argparse, runpy, sys
parse_args, parse_known_args, inside = argparse.ArgumentParser.parse_args, argparse.ArgumentParser.parse_known_args, []
def parsed():
    print("PARSED")
    raise SystemExit(0)
def whole(self, *args, **kwargs):
    inside.append(1)
    try:
        parse_args(self, *args, **kwargs)
    finally:
        inside.pop()
    parsed()
def known(self, *args, **kwargs):
    result = parse_known_args(self, *args, **kwargs)
    if not inside:
        parsed()
    return result
argparse.ArgumentParser.parse_args = whole
argparse.ArgumentParser.parse_known_args = known
sys.argv = sys.argv[1:]
sys.path.insert(0, sys.argv[0].rsplit("/", 1)[0])
runpy.run_path(sys.argv[0], run_name="__main__")
"""


def parse_tool(script: str, args: list[str]) -> str | None:
    path = REPO / script
    if not path.exists():
        return f"{script} does not exist"
    if path.suffix == ".sh":
        text = path.read_text()
        unknown = [a for a in args if a.startswith("-") and not re.search(rf"(^|[ |(]){re.escape(a)}[)| ]", text, re.M)]
        return f"{script} does not handle {unknown}" if unknown and "test.sh" not in script else None
    done = subprocess.run([sys.executable, "-c", INTERCEPT, str(path), *args], capture_output=True, text=True,
                          cwd=REPO, timeout=120)
    return None if done.returncode == 0 and "PARSED" in done.stdout else done.stderr[-600:] or done.stdout[-600:]


def check(command: str, tmp: Path, served: set[str]) -> tuple[str, str | None]:
    """(how it was checked, the problem or None)."""
    words = shlex.split(command.replace("…", "..."), posix=True)
    while words and re.fullmatch(r"[A-Z_][A-Z0-9_]*=\S*", words[0]):
        words = words[1:]  # the environment it runs with: the command is what follows
    if words[:3] == ["ip", "netns", "exec"]:
        words = words[4:]  # run inside a network namespace (Java's benchmarks): the command follows
    if words[:1] == ["valgrind"]:
        words = words[1:]  # its instructions counted (benchmarks.md): the command follows valgrind's options
        while words and words[0].startswith("-"):
            words = words[1:]
    program = words[0].removeprefix(".venv/bin/")
    variants = concrete(words[1:], tmp)
    first = lambda fn: next((problem for args in variants if (problem := fn(args))), None)  # noqa: E731
    if program == "namesrv-admin":
        return "parsed by namesrv-admin", first(parse_admin)
    if program in ("python", "python3") and words[1:3] == ["-m", "twisted_namesrv.admin"]:
        return "parsed by namesrv-admin", first(lambda a: parse_admin(a[2:]))
    if program == "twisted-namesrv" or (program in ("python", "python3") and words[1:3] == ["-m", "twisted_namesrv"]):
        skip = 0 if program == "twisted-namesrv" else 2
        return "parsed by the server", first(lambda a: parse_server(a[skip:], tmp))
    if program == "twistd":
        args = [w for w in words[1:] if w not in ("-n", "--nodaemon")]
        if args[:1] == ["--version"]:
            done = subprocess.run([str(VENV_BIN / "twistd"), "--version"], capture_output=True, text=True)
            return "run", None if done.returncode == 0 else done.stderr
        if args[:1] == ["--reactor"] and len(args) > 1:
            from twisted.application.reactors import getReactorTypes

            if args[1] not in {r.shortName for r in getReactorTypes()}:
                return "twistd", f"no twistd reactor {args[1]}"
            args = args[2:]
        if not args:
            return "twistd's own flag, named", None  # `twistd -n` in prose
        plugin = args[0]
        rest = concrete(args[1:], tmp)
        if plugin == "namesrv":
            return "parsed by the server", next((p for a in rest if (p := parse_server(a, tmp))), None)
        if plugin == "namesrv-controller":
            return "parsed by the controller", next((p for a in rest if (p := parse_controller(a, tmp))), None)
        return "twistd", f"no twistd plugin {plugin}"
    if program in ("python", "python3") and words[1:3] == ["-m", "spark_analysis"]:
        return "parsed by the capture report", first(lambda a: parse_spark(a[2:]))
    script = next((w for w in words if w.startswith("tools/")), None)
    if script and (program.startswith("tools/") or program in ("python", "python3")):
        args_at = words.index(script) + 1
        return f"parsed by {script}", next((p for a in concrete(words[args_at:], tmp, together=True)
                                            if (p := parse_tool(script, a))), None)
    if program in ("curl", "chromium"):
        url = next(w for w in words[1:] if "127.0.0.1" in w)
        path = "/" + url.split("/", 3)[-1] if url.count("/") >= 3 else "/" + url.split("/", 1)[1]
        return f"served to {program}", None if path.split("?")[0] in served else f"{path} is not served"
    if program == "podman":
        image = next((w for w in words if "twisted-namesrv:" in w), IMAGE)
        return "image named", None if image == IMAGE else f"{image} is not what tools/container-build.sh tags"
    if program == "promtool":
        if shutil.which("promtool") is None:
            missing = [w for w in words if w.startswith("deploy/") and not (REPO / w).exists()]
            return "files named (no promtool here)", f"{missing} missing" if missing else None
        done = subprocess.run(words, capture_output=True, text=True, cwd=REPO, timeout=120)
        return "run", None if done.returncode == 0 else done.stdout + done.stderr
    if program == "kubectl":
        files = [words[i + 1] for i, w in enumerate(words) if w == "-f"]
        return "manifest exists", next((f"{f} missing" for f in files if not (REPO / f).exists()), None)
    if program in ("systemctl", "install", "spark-submit", "cp") or words[0].startswith("/opt/"):
        named = [w for w in words if w.startswith(("deploy/", "dist/"))]
        wheel = [w for w in named if w.endswith(".whl")]
        if wheel and wheel[0] != f"dist/twisted_namesrv-{__version__}-py3-none-any.whl":
            return "files named", f"{wheel[0]}: not this version's wheel"
        missing = [w for w in named if w.startswith("deploy/") and not (REPO / w).exists()]
        return "not run here (names checked)", f"{missing} missing" if missing else None
    if program in ("python", "python3") and words[1:3] in (["-m", "venv"], ["-m", "pip"]):
        return "not run here (names checked)", None
    return "unknown", f"no rule checks {program!r}: add one to tests/test_docs_commands.py"


def checked(command: str, prose: bool, tmp: Path, served: set[str]) -> tuple[str, str | None]:
    """check(); a command named in prose may leave out what is required (`namesrv-admin compare`),
    never carry what its program refuses."""
    how, problem = check(command, tmp, served)
    if prose and problem and re.search(r"arguments are required|required: |expected one argument|too few", problem):
        return how + " (a mention)", None
    return how, problem


@pytest.fixture(scope="module")
def served_paths() -> set[str]:
    from twisted_namesrv.service import NamesrvService
    from twisted_namesrv.state.config import NamesrvConfig

    service = NamesrvService.from_config(NamesrvConfig({"metricsPort": 9877}, schema=SERVER_SCHEMA))
    paths = {"/" + name.decode() for name in service.http_resources()} | {"/", "/metrics"}
    api = ("overview", "clusters", "topics", "route", "kv", "events")
    return paths | {f"/api/{name}" for name in api}


def test_every_documented_command_parses_or_names_what_exists(tmp_path, served_paths, monkeypatch):
    monkeypatch.chdir(tmp_path)
    commands = documented_commands()
    assert len(commands) > 80
    results = [(page, command, *checked(command, prose, tmp_path, served_paths)) for page, command, prose in commands]
    kinds: dict[str, int] = {}
    for _, _, how, _ in results:
        kinds[how] = kinds.get(how, 0) + 1
    print("\n".join(f"{count:4} {how}" for how, count in sorted(kinds.items())))  # the CI log's account
    assert [f"{page}: {command}: {problem}" for page, command, _, problem in results if problem] == []


def test_a_usage_line_in_the_wrong_order_is_caught(tmp_path, served_paths):
    """What the README printed before: the controller's -a before the subcommand."""
    how, problem = check("namesrv-admin -a CONTROLLER getControllerMetaData", tmp_path, served_paths)
    assert how == "parsed by namesrv-admin" and "invalid choice" in problem
    assert check("namesrv-admin getControllerMetaData -a CONTROLLER", tmp_path, served_paths)[1] is None
    assert check("twistd -n namesrv --no-such-option", tmp_path, served_paths)[1]
    assert check("twistd --reactor no-such-reactor -n namesrv", tmp_path, served_paths)[1]
    assert not check("twistd --reactor namesrv-epoll -n namesrv", tmp_path, served_paths)[1]
    assert check("tools/setup-env.sh --no-such-option", tmp_path, served_paths)[1]
    assert check("tools/bench/run.py --no-such-option", tmp_path, served_paths)[1]


def test_usage_lines_expand_to_each_optional_part_and_choice(tmp_path):
    words = shlex.split("x [--compat 5.3.3|4.9.8] [-p] [--tls-mode MODE --tls-cert PEM] NS")
    assert concrete(words, tmp_path) == [
        ["x", "NS"], ["x", "NS", "--compat", "5.3.3"], ["x", "NS", "--compat", "4.9.8"], ["x", "NS", "-p"],
        ["x", "NS", "--tls-mode", "permissive", "--tls-cert", str(tmp_path / "pem")]]


# -- the README's quick start, as printed ----------------------------------------------------------

def quick_start() -> list[str]:
    readme = (REPO / "README.md").read_text(encoding="utf-8")
    block = readme.split("**Try it without Java**", 1)[1]
    return logical_lines(FENCE.search(block).group(2), console=False)


def http_status(url: str) -> int:
    try:
        with urllib.request.urlopen(url, timeout=5) as answer:
            return answer.status
    except urllib.error.HTTPError as error:
        return error.code


@pytest.mark.skipif(shutil.which("unshare") is None or os.geteuid() != 0,
                    reason="runs the README's ports in a network namespace of its own: needs root and unshare")
@pytest.mark.skipif(not (REPO / ".venv" / "bin" / "namesrv-admin").exists(),
                    reason="the quick start runs the checkout's .venv (tools/setup-env.sh makes it)")
def test_the_readmes_quick_start_runs_as_printed(tmp_path):
    """Its three shells: the server and the simulated brokers run in the background (they run until
    Ctrl-C), then the third line's output is checked, all in a network namespace where 9876 and 9877
    are free, with HOME in a temporary directory (the server's state goes to ~/namesrv)."""
    server, brokers, check_line = quick_start()
    assert server.startswith("tools/run-server.sh") and brokers.startswith(".venv/bin/namesrv-admin simulate-broker")
    script = f"""
ip link set lo up
cd {shlex.quote(str(REPO))}
{server} > {tmp_path}/server.log 2>&1 &
for i in $(seq 100); do curl -s -o /dev/null 127.0.0.1:9877/readyz && break; sleep 0.2; done
{brokers} > {tmp_path}/brokers.log 2>&1 &
for i in $(seq 50); do grep -q registered {tmp_path}/brokers.log && break; sleep 0.2; done
sleep 0.5
{check_line}
echo; echo "status page: $(curl -s -o /dev/null -w '%{{http_code}}' 127.0.0.1:9877/)"
kill %2; wait %2; kill %1; wait %1
"""
    env = dict(os.environ, HOME=str(tmp_path), PATH=f"{VENV_BIN}:{os.environ['PATH']}")
    done = subprocess.run(["unshare", "-n", "bash", "-c", script], capture_output=True, text=True, env=env,
                          timeout=120)
    logs = (tmp_path / "server.log").read_text() + (tmp_path / "brokers.log").read_text()
    assert done.returncode in (0, 143), done.stderr + logs
    out = done.stdout
    assert re.search(r"DefaultCluster +broker-a +0 ", out) and "broker-a-1" in out, out + logs  # clusterList: 2
    assert '"failing": []' in out, out  # /readyz
    assert "status page: 200" in out, out
