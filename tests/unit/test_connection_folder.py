"""Where a student's kernel sockets go (autograder/kernel/kernels.py's connection_folder): in the
session's folder, or, where that path is too long for a Unix socket, a folder of /tmp's that a
local cluster's run can find by its tag and remove, its workers ended mid-task by a stop."""

from __future__ import annotations

import os
import shutil

import pytest

from autograder.kernel.kernels import (
    SOCKET_NAME_ROOM,
    SOCKET_PATH_MAX,
    SOCKETS_TAG_VARIABLE,
    connection_folder,
    socket_folders_prefix,
)


def test_a_short_session_folder_holds_its_sockets(tmp_path):
    assert len(os.fsencode(tmp_path / "s" / "connection")) + SOCKET_NAME_ROOM <= SOCKET_PATH_MAX
    made = connection_folder(tmp_path / "s")
    assert made == tmp_path / "s" / "connection" and made.is_dir()


@pytest.mark.parametrize(("tag", "prefix"), [("3f9a0c", "autograder-sockets-3f9a0c-"), ("", "autograder-sockets-")])
def test_a_deep_folder_sends_them_to_tmp_with_the_runs_tag(tmp_path, monkeypatch, tag, prefix):
    deep = tmp_path / ("d" * (SOCKET_PATH_MAX - SOCKET_NAME_ROOM))
    monkeypatch.setenv(SOCKETS_TAG_VARIABLE, tag)
    made = connection_folder(deep)
    try:
        assert made.parent == type(made)("/tmp") and made.name.startswith(prefix)
        assert socket_folders_prefix(tag) == prefix
        assert len(os.fsencode(made)) + SOCKET_NAME_ROOM <= SOCKET_PATH_MAX
    finally:
        shutil.rmtree(made, ignore_errors=True)


def test_a_tag_that_is_no_plain_name_is_not_used(tmp_path, monkeypatch):
    monkeypatch.setenv(SOCKETS_TAG_VARIABLE, "../../home")
    made = connection_folder(tmp_path / ("d" * SOCKET_PATH_MAX))
    try:
        assert (
            made.parent == type(made)("/tmp") and made.name.startswith("autograder-sockets-") and ".." not in str(made)
        )
    finally:
        shutil.rmtree(made, ignore_errors=True)
