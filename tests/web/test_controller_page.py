"""The status page's Controller section in headless Chromium: per broker group the master, its epoch,
the sync-state set with its epoch, the members and the last election - as a browser renders them
from /api/controller, with two controller-mode broker doubles (tests/controller/broker_pair.py)."""

from __future__ import annotations

import html
import os
import re

import pytest_twisted
from twisted.internet import reactor, utils

from tests.controller.broker_pair import ControllerModeBroker
from tests.support import free_port, server_config
from twisted_namesrv.service import NamesrvService

from .test_status_page import chromium


def controller_rows(dom: str) -> list[list[str]]:
    """The cells' text of each body row of the Controller table."""
    section = re.search(r'<table id="controller-groups">.*?<tbody>(.*?)</tbody>', dom, re.S)
    assert section, "no Controller table in the page"
    return [[" ".join(html.unescape(re.sub(r"<[^>]+>", " ", cell)).split())
             for cell in re.findall(r"<td[^>]*>(.*?)</td>", row, re.S)]
            for row in re.findall(r"<tr[^>]*>(.*?)</tr>", section.group(1), re.S)]


@pytest_twisted.inlineCallbacks
def test_the_controller_section_shows_each_groups_master_epoch_and_sync_state_set(tmp_path):
    browser = chromium()
    web_port = free_port()
    service = NamesrvService.from_config(server_config(tmp_path, metricsPort=web_port), reactor, controller_port=0)
    service.startService()
    namesrv_port = (yield service.port_ready).getHost().port
    yield service.controller.ready
    controller_port = service.controller.port.getHost().port
    c0, c1 = ControllerModeBroker(reactor), ControllerModeBroker(reactor)
    flags = ["--headless", "--no-sandbox", "--disable-gpu", "--virtual-time-budget=5000",
             f"--user-data-dir={tmp_path / 'profile'}", "--dump-dom"]
    try:
        yield c0.start_in_controller_mode(namesrv_port, controller_port)
        yield c1.start_in_controller_mode(namesrv_port, controller_port)
        answer = yield c0.alter_sync_state_set([1, 2])
        assert answer.code == 0, answer.header
        dom, _, status = yield utils.getProcessOutputAndValue(browser, [*flags, f"http://127.0.0.1:{web_port}/"],
                                                              env={**os.environ, "TZ": "UTC"})
    finally:
        yield c0.kill()
        yield c1.kill()
        yield service.stopService()
    text = dom.decode()
    assert status == 0, text[-2000:]
    role = re.search(r'<span id="controller-role"[^>]*>(.*?)</span>', text, re.S)
    assert role and role.group(1).startswith(f"leader on 127.0.0.1:{controller_port}, "), role and role.group(1)
    assert '<div id="controller" hidden' not in text, "the section is shown when the NameServer has a controller"
    rows = controller_rows(text)
    assert len(rows) == 1, rows
    name, master, epoch, sync_state_set, members, election = rows[0]
    assert (name, master, epoch, sync_state_set) == ("broker-ctl", f"1 {c0.addr}", "1", "[1, 2] (2)")
    assert members == f"1 {c0.addr}; 2 {c1.addr}"
    assert re.fullmatch(r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d.*: master 1 from \[.*\], broker; .+", election), election
