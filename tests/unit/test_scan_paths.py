"""The registry's two fast paths: a cold scan shared with a forked child, and a refresh
that skips listing a root whose own stamp has not moved. Each must give what the plain
path gives, and recover when its helper fails."""

from __future__ import annotations

import gc
import os
import pickle
import shutil
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from test_registry import make_skill, touch

from agentsim.skills import SkillDescriptor, SkillRegistry, _split
from agentsim.skills import _scan as scan_module


def _mixed_root(root: Path) -> Path:
    """Good skills with some of every kind of trouble between them."""
    for i in range(40):
        make_skill(root, f"skill-{i:02d}", extra="tags: [a, b]\nisolation: inline\n")
    make_skill(root, "broken-yaml", extra="tags: [unclosed\n")
    make_skill(root, "wrong-name").joinpath("SKILL.md").write_text(
        "---\nname: other\ndescription: d\n---\n"
    )
    gone = make_skill(root, "no-script")
    (gone / "scripts" / "no_script.py").unlink()
    (root / "not-a-skill").mkdir()
    (root / "README.md").write_text("Not a skill.\n")
    make_skill(root, ".hidden")
    outside = make_skill(root.parent / "elsewhere", "far-away")
    (root / "far-away").symlink_to(outside, target_is_directory=True)
    (root / "alias").symlink_to(root / "skill-00", target_is_directory=True)
    return root


def _scan(root: Path) -> SkillRegistry:
    reg = SkillRegistry()
    reg.scan_builtin(root)
    return reg


def _same(a: SkillRegistry, b: SkillRegistry) -> None:
    assert a.list_all() == b.list_all()
    assert [type(d) for d in a.list_all()] == [SkillDescriptor] * len(a.list_all())
    assert a.diagnostics == b.diagnostics
    assert a.snapshot().scans[0].entries == b.snapshot().scans[0].entries


@pytest.fixture
def force_split(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(scan_module, "SPLIT_MIN", 2)
    monkeypatch.setattr(scan_module, "fork_ok", lambda: True)


@pytest.fixture
def serial(tmp_path: Path) -> tuple[Path, SkillRegistry]:
    root = _mixed_root(tmp_path / "skills")
    return root, _scan(root)


def test_a_split_scan_registers_exactly_what_one_process_does(
    serial: tuple[Path, SkillRegistry], force_split: None
) -> None:
    root, expected = serial
    got = _scan(root)
    _same(got, expected)
    assert len(got.list_all()) == 40
    messages = "\n".join(str(d) for d in got.diagnostics)
    # the alias is followed (it stays in the root) and then fails on its name
    for folder in ("broken-yaml", "wrong-name", "no-script", "far-away", "alias"):
        assert folder in messages
    # the split scan refreshes like any other
    touch(root / "skill-03" / "SKILL.md", "---\nname: skill-03\ndescription: New.\n---\n")
    result = got.refresh()
    assert result.changed == ("built-in@skill-03",)
    assert got.get("built-in@skill-03").description == "New."


def test_a_child_that_dies_at_once_loses_nothing(
    serial: tuple[Path, SkillRegistry], force_split: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(_split, "_child", lambda *args: os._exit(3))
    _same(_scan(serial[0]), serial[1])


def test_a_child_that_sends_garbage_loses_nothing(
    serial: tuple[Path, SkillRegistry], force_split: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    def garbage(fd: int, done: object) -> None:
        data = b"not a pickle"
        os.write(fd, _split._HEADER.pack(len(data)) + data)

    monkeypatch.setattr(_split, "_send", garbage)
    _same(_scan(serial[0]), serial[1])


def test_a_child_that_hangs_is_killed_and_its_share_read_here(
    serial: tuple[Path, SkillRegistry], force_split: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    def hang(count: int, work: object, claims: bytearray, *fds_and_mask: object) -> None:
        for i in range(count):
            claims[i] = _split._CHILD  # takes everything, delivers nothing
        time.sleep(60)
        os._exit(0)

    monkeypatch.setattr(_split, "_child", hang)
    monkeypatch.setattr(_split, "_GRACE_S", 0.2)
    started = time.monotonic()
    _same(_scan(serial[0]), serial[1])
    assert time.monotonic() - started < 20


def test_split_work_returns_results_in_order_whoever_computed_them() -> None:
    squares = _split.split_work(5000, lambda i: (i, i * i, os.getpid()))
    assert [(i, sq) for i, sq, _ in squares] == [(i, i * i) for i in range(5000)]
    assert {pid for *_, pid in squares} >= {os.getpid()}
    assert _split.split_work(1, str) == ["0"]


def test_fork_ok_says_no_when_turned_off_or_with_a_second_thread(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("AGENTSIM_SCAN_SPLIT", "0")
    assert _split.fork_ok() is False
    monkeypatch.delenv("AGENTSIM_SCAN_SPLIT")
    stop = threading.Event()
    thread = threading.Thread(target=stop.wait)
    thread.start()
    try:
        assert _split.fork_ok() is False
    finally:
        stop.set()
        thread.join()


def test_fork_ok_says_yes_in_a_single_threaded_process_with_two_cpus() -> None:
    code = "from agentsim.skills._split import fork_ok; print(fork_ok())"
    out = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        check=True,
        env={k: v for k, v in os.environ.items() if k != "AGENTSIM_SCAN_SPLIT"},
    )
    assert out.stdout.strip() == str(len(os.sched_getaffinity(0)) >= 2)


def test_descriptors_pickle_to_equal_frozen_descriptors(
    serial: tuple[Path, SkillRegistry],
) -> None:
    for desc in serial[1].list_all():
        back = pickle.loads(pickle.dumps(desc))
        assert back == desc and type(back) is SkillDescriptor
        with pytest.raises(AttributeError, match="cannot assign to field 'name'"):
            back.name = "x"  # type: ignore[misc]


# -- refresh of a root whose stamp has not moved ---------------------------------------------


@pytest.fixture
def settled(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> tuple[Path, SkillRegistry]:
    """A scanned root whose stamp is trusted at once (no racy window), with a pause after
    the scan so that any later change moves the file system's clock."""
    monkeypatch.setattr(scan_module, "RACY_NS", 0)
    root = tmp_path / "skills"
    for name in ("alpha", "beta", "gamma"):
        make_skill(root, name)
    (root / "drafts").mkdir()
    reg = _scan(root)
    assert reg.snapshot().scans[0].stamp is not None
    assert reg.snapshot().scans[0].others == ("drafts",)
    time.sleep(0.05)
    return root, reg


def test_unchanged_settled_root_refreshes_without_a_new_generation(
    settled: tuple[Path, SkillRegistry],
) -> None:
    _, reg = settled
    gen = reg.generation
    result = reg.refresh()
    assert (result.generation, result.added, result.changed, result.removed) == (gen, (), (), ())


def test_settled_root_picks_up_edits_deletions_and_a_skill_born_in_a_plain_folder(
    settled: tuple[Path, SkillRegistry],
) -> None:
    root, reg = settled
    touch(root / "beta" / "SKILL.md", "---\nname: beta\ndescription: Edited.\n---\n")
    (root / "gamma" / "SKILL.md").unlink()  # the folder stays: the root's stamp does not move
    make_skill(root, "drafts")  # a SKILL.md appears in a folder that had none
    result = reg.refresh()
    assert result.changed == ("built-in@beta",)
    assert result.removed == ("built-in@gamma",)
    assert result.added == ("built-in@drafts",)
    assert [d.name for d in reg.list_all()] == ["alpha", "beta", "drafts"]
    assert reg.get("built-in@beta").description == "Edited."
    assert reg.snapshot().scans[0].others == ("gamma",)


def test_settled_root_lists_again_when_a_folder_is_added_or_removed(
    settled: tuple[Path, SkillRegistry],
) -> None:
    root, reg = settled
    make_skill(root, "delta")
    assert reg.refresh().added == ("built-in@delta",)
    time.sleep(0.05)
    shutil.rmtree(root / "alpha")
    assert reg.refresh().removed == ("built-in@alpha",)


def test_settled_root_that_disappears_is_reported(settled: tuple[Path, SkillRegistry]) -> None:
    root, reg = settled
    shutil.rmtree(root)
    result = reg.refresh()
    assert sorted(result.removed) == ["built-in@alpha", "built-in@beta", "built-in@gamma"]
    assert "does not exist" in str(reg.diagnostics[-1])


def test_a_young_root_or_one_with_links_is_listed_on_every_refresh(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    root = tmp_path / "skills"
    make_skill(root, "alpha")
    assert _scan(root).snapshot().scans[0].stamp is None  # changed under RACY_NS ago
    monkeypatch.setattr(scan_module, "RACY_NS", 0)
    assert _scan(root).snapshot().scans[0].stamp is not None
    linked = tmp_path / "linked"
    make_skill(linked, "alpha")
    (linked / "alias").symlink_to(linked / "alpha", target_is_directory=True)
    assert _scan(linked).snapshot().scans[0].stamp is None


def test_a_root_scanned_young_is_stamped_by_a_later_refresh_that_changes_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    root = tmp_path / "skills"
    make_skill(root, "alpha")
    reg = _scan(root)
    before = reg.snapshot()
    assert before.scans[0].stamp is None
    monkeypatch.setattr(scan_module, "RACY_NS", 0)  # as if two seconds had passed
    result = reg.refresh()
    assert (result.generation, result.added, result.changed) == (before.generation, (), ())
    after = reg.snapshot()
    assert after.scans[0].stamp is not None and after is not before
    assert after.list_all() == before.list_all() and before.scans[0].stamp is None
    view = reg.view(tmp_path / "agent-skills")
    assert view.refresh().generation == view.generation


def test_fork_ok_says_no_with_one_cpu_or_without_proc(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("AGENTSIM_SCAN_SPLIT", raising=False)
    real_listdir = os.listdir
    monkeypatch.setattr(os, "listdir", lambda path: ["1"])  # one thread, as far as we know
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {0})
    assert _split.fork_ok() is False
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {0, 1})
    assert _split.fork_ok() is True

    def no_proc(path: str) -> list[str]:
        raise FileNotFoundError(path)

    monkeypatch.setattr(os, "listdir", no_proc)
    assert _split.fork_ok() is False
    monkeypatch.setattr(os, "listdir", real_listdir)


def test_frames_are_taken_only_whole_and_a_closed_pipe_is_seen() -> None:
    read_fd, write_fd = os.pipe()
    os.set_blocking(read_fd, False)
    inbox = _split._Inbox(read_fd)
    data = pickle.dumps([(3, "three"), (4, "four")])
    frame = _split._HEADER.pack(len(data)) + data
    try:
        os.write(write_fd, frame[:5])
        assert inbox.drain() is False and inbox.done == {}
        os.write(write_fd, frame[5:-1])
        assert inbox.drain() is False and inbox.done == {}
        os.write(write_fd, frame[-1:])
        os.close(write_fd)
        assert inbox.drain() is True
        assert inbox.done == {3: "three", 4: "four"} and not inbox.buffer
    finally:
        os.close(read_fd)


def test_reaping_a_child_that_is_already_gone_is_quiet() -> None:
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the child
        os._exit(0)
    os.waitpid(pid, 0)
    _split._reap(pid, kill=True)  # no such process any more: neither kill nor wait fails


def test_the_pipe_keeps_its_size_where_it_cannot_grow(monkeypatch: pytest.MonkeyPatch) -> None:
    def refuse(*args: object) -> None:
        raise PermissionError("pipe-max-size")

    monkeypatch.setattr(_split.fcntl, "fcntl", refuse)
    read_fd, write_fd = os.pipe()
    try:
        _split._widen(write_fd)
        assert os.write(write_fd, b"x") == 1
    finally:
        os.close(read_fd)
        os.close(write_fd)


def test_settled_root_follows_a_symlinked_skill_md_on_each_refresh(
    settled: tuple[Path, SkillRegistry],
) -> None:
    root, reg = settled
    md = root / "beta" / "SKILL.md"
    md.rename(root / "beta" / "REAL.md")
    md.symlink_to("REAL.md")  # inside the skill: followed, and read again each refresh
    assert reg.refresh().changed == ()
    touch(root / "beta" / "REAL.md", "---\nname: beta\ndescription: Via a link.\n---\n")
    assert reg.refresh().changed == ("built-in@beta",)
    assert reg.get("built-in@beta").description == "Via a link."


def test_a_scan_that_cannot_fork_reads_everything_itself(
    serial: tuple[Path, SkillRegistry], force_split: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    def no_fork() -> int:
        raise BlockingIOError(11, "Resource temporarily unavailable")

    monkeypatch.setattr(os, "fork", no_fork)
    _same(_scan(serial[0]), serial[1])


def test_a_large_first_scan_puts_its_objects_in_the_oldest_generation(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from agentsim.skills import registry as registry_module

    monkeypatch.setattr(registry_module, "PROMOTE_MIN", 3)
    root = tmp_path / "skills"
    for i in range(4):
        make_skill(root, f"s-{i}")
    assert gc.isenabled()
    reg = _scan(root)
    assert gc.isenabled()
    desc = reg.list_all()[0]
    assert any(obj is desc for obj in gc.get_objects(generation=2))
    gc.disable()
    try:
        small = _scan(root / "s-0")  # under PROMOTE_MIN: left where it was made
        assert not gc.isenabled()  # a collector turned off stays off
    finally:
        gc.enable()
    assert small.list_all() == ()


def test_a_split_scan_works_when_its_pipe_gets_an_fd_over_1023(
    serial: tuple[Path, SkillRegistry], force_split: None
) -> None:
    import resource

    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard != resource.RLIM_INFINITY and hard < 1200:
        pytest.skip(f"the fd limit ({hard}) is too low to open 1,100 files")
    resource.setrlimit(resource.RLIMIT_NOFILE, (max(soft, 1200), hard))
    held = [os.open(os.devnull, os.O_RDONLY) for _ in range(1100)]
    try:
        _same(_scan(serial[0]), serial[1])  # select() would refuse the pipe's fd here
    finally:
        for fd in held:
            os.close(fd)
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))


def test_a_large_scan_leaves_what_the_application_froze_frozen(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from agentsim.skills import registry as registry_module

    monkeypatch.setattr(registry_module, "PROMOTE_MIN", 1)
    make_skill(tmp_path / "skills", "alpha")
    gc.freeze()
    try:
        frozen = gc.get_freeze_count()
        assert frozen > 0
        _scan(tmp_path / "skills")
        assert gc.get_freeze_count() == frozen
    finally:
        gc.unfreeze()


def test_a_root_named_with_a_trailing_slash_refreshes_to_the_same_paths(
    settled: tuple[Path, SkillRegistry],
) -> None:
    root, _ = settled
    reg = SkillRegistry()
    reg.scan_builtin(str(root) + os.sep)
    time.sleep(0.05)
    touch(root / "beta" / "SKILL.md", "---\nname: beta\ndescription: Edited.\n---\n")
    assert reg.refresh().changed == ("built-in@beta",)
    assert reg.get("built-in@beta").path == str(root / "beta")
    assert reg.list_all() == _scan(root).list_all()


def test_settled_root_reports_diagnostics_in_folder_order_and_keeps_its_generation(
    settled: tuple[Path, SkillRegistry], tmp_path: Path
) -> None:
    root, reg = settled
    outside = make_skill(tmp_path / "elsewhere", "far") / "SKILL.md"
    (root / "drafts" / "SKILL.md").symlink_to(outside)  # a folder listed among the others
    (root / "gamma" / "SKILL.md").unlink()
    (root / "gamma" / "SKILL.md").symlink_to(outside)  # a known skill, now a link out
    first = reg.refresh()
    assert first.removed == ("built-in@gamma",)
    folders = [Path(d.file).parent.name for d in reg.diagnostics]
    assert folders == ["drafts", "gamma"]
    assert all("leaves the skills root" in d.message for d in reg.diagnostics)
    again = reg.refresh()
    assert (again.generation, again.added, again.changed, again.removed) == (
        first.generation,
        (),
        (),
        (),
    )
    assert [Path(d.file).parent.name for d in reg.diagnostics] == folders


def test_a_second_root_of_a_namespace_loses_its_duplicate_ids(tmp_path: Path) -> None:
    first, second = tmp_path / "one", tmp_path / "two"
    make_skill(first, "alpha", description="First alpha.")
    make_skill(second, "alpha", description="Second alpha.")
    make_skill(second, "beta")
    broken = make_skill(second, "gamma")
    (broken / "SKILL.md").write_text("---\nname: gamma\n---\n")
    reg = SkillRegistry()
    reg.scan_builtin(first)
    result = reg.scan_builtin(second)
    assert "built-in@beta" in result.added
    assert [d.skill_id for d in reg.list_all()] == ["built-in@alpha", "built-in@beta"]
    assert reg.get("built-in@alpha").description == "First alpha."
    messages = [d.message for d in reg.diagnostics]
    assert any("no description" in m for m in messages)
    assert any(m.startswith("duplicate skill id 'built-in@alpha'") for m in messages)


def test_an_agent_view_shows_a_new_root_diagnostic_though_no_skill_moved(
    settled: tuple[Path, SkillRegistry], tmp_path: Path
) -> None:
    root, reg = settled
    view = reg.view(root)  # the settled root, seen as one agent's own folder
    before = view.diagnostics
    time.sleep(0.05)
    outside = make_skill(tmp_path / "elsewhere", "far") / "SKILL.md"
    (root / "drafts" / "SKILL.md").symlink_to(outside)
    result = view.refresh()
    assert (result.added, result.changed, result.removed) == ((), (), ())
    new = [d for d in view.diagnostics if d not in before]
    assert len(new) == 1 and "leaves the skills root" in new[0].message


def test_a_scan_out_of_fds_for_a_pipe_reads_everything_itself(
    serial: tuple[Path, SkillRegistry], force_split: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    def no_pipe() -> tuple[int, int]:
        raise OSError(24, "Too many open files")

    monkeypatch.setattr(os, "pipe", no_pipe)
    _same(_scan(serial[0]), serial[1])
