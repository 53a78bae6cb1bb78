"""Where `teamdesk lab` serves and whether it opens a browser, decided before the link is
printed: the learner's link always points at this lab."""

from __future__ import annotations

import socket

import pytest

from devkit.lab import DEFAULT_PORT, choose_port, opens_browser, port_free


def test_the_default_port_gives_way_to_the_next_free_one() -> None:
    taken = {DEFAULT_PORT, DEFAULT_PORT + 1}
    assert choose_port(None, lambda p: p not in taken) == DEFAULT_PORT + 2
    assert choose_port(None, lambda p: True) == DEFAULT_PORT


def test_a_port_the_learner_chose_is_never_swapped_for_another() -> None:
    assert choose_port(9100, lambda p: True) == 9100
    with pytest.raises(SystemExit, match="port 9100 is in use"):
        choose_port(9100, lambda p: p != 9100)


def test_when_every_spare_port_is_taken_the_lab_says_so() -> None:
    with pytest.raises(SystemExit, match="all in use"):
        choose_port(None, lambda p: False)


def test_a_port_something_listens_on_is_not_free() -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        port = s.getsockname()[1]
        assert not port_free(port)
    assert port_free(port)


@pytest.mark.parametrize(("platform", "environ", "opens"), [
    ("darwin", {}, True),                         # a Mac has no DISPLAY, and a browser
    ("win32", {}, True),
    ("linux", {"WSL_DISTRO_NAME": "Ubuntu"}, True),  # WSL: Windows' browser
    ("linux", {"DISPLAY": ":0"}, True),
    ("linux", {"WAYLAND_DISPLAY": "wayland-0"}, True),
    ("linux", {}, False),                          # SSH without a display, a container
])
def test_the_browser_opens_where_the_platform_has_one(platform, environ, opens) -> None:
    assert opens_browser(False, environ, platform) is opens
    assert opens_browser(True, environ, platform) is False  # --no-browser always wins
