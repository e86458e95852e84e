"""report.html given names a capture's peer chose: any peer may register a broker with the
NameServer (Java's checks nothing), so a capture of its traffic carries whatever names it sent.
Plotly reads the text it draws as a markup of its own, and the page's tables showed the
Unicode controls raw: each name shows as itself, escaped, and lays nothing out."""

from __future__ import annotations

import json
from pathlib import Path

from spark_analysis.analysis import findings
from spark_analysis.model.periods import TimeBins
from spark_analysis.output import report
from spark_analysis.output.report import _hash

#: a live link, a line break, a style, a hover template's placeholder, a bidi override, an ESC and a line separator
HOSTILE_CLUSTER = '<a href="https://evil.example/">open</a>'
HOSTILE_NAME = 'b\u202e<br><span style="font-size:99px">%{customdata}</span>\x1b[2J\u2028&lt;'


def _stay(cluster: str, name: str) -> dict:
    return {"cluster": cluster, "broker_name": name, "broker_id": "0", "role": "MASTER",
            "broker_addr": "10.0.0.9:10911", "server": "10.0.0.2:9876", "first_seen": 100.0, "ids": None,
            "registrations": 3, "bins": {"bin": [0, 1, 2], "heartbeats": [1, 1, 1], "topics": [3, 3, 4]},
            "gaps": [{"from": 110.0, "to": 250.0, "seconds": 140.0, "expired": True, "open": False}],
            "closes": [{"t": 260.0, "how": "fin from client"}], "interval_buckets": [0, 2, 0, 1]}


def _figures(cluster: str, name: str) -> str:
    """The three pictures of brokers, as the page writes them (JSON)."""
    shown = [_stay(cluster, name)]
    bins = TimeBins.over([(100.0, 300.0)])
    named = findings.at_nameserver(shown)
    return json.dumps([report.heartbeat_timeline(shown, bins, named), report.interval_distributions(shown, named),
                       report.topic_counts(shown, bins, named)])


def _strings(value: object):
    """Every string in a JSON value."""
    if isinstance(value, str):
        yield value
    elif isinstance(value, dict):
        for item in value.values():
            yield from _strings(item)
    elif isinstance(value, list):
        for item in value:
            yield from _strings(item)


def test_a_peer_s_names_are_drawn_as_text_never_as_plotly_s_markup() -> None:
    """A broker named with ``<a href="https://…">``, ``<br>``, ``<span style>`` and ``%{customdata}``:
    Plotly made the link live in the timeline's row label, broke and styled the label, and filled
    the placeholder in the hover. Every string of the figures is now the one a broker of a plain
    name gives, with its label as plot_text (entities, escapes) in the same places."""
    hostile, plain = _figures(HOSTILE_CLUSTER, HOSTILE_NAME), _figures("C", "b")
    drawn = list(_strings(json.loads(hostile)))
    assert not [text for text in drawn if "<a href" in text or "<span" in text or not text.isprintable()]
    label = findings.broker_label(_stay(HOSTILE_CLUSTER, HOSTILE_NAME))
    shown = report.plot_text(label)
    assert "<" not in shown and "%{" not in shown and shown.isprintable()
    assert "&lt;a href=\"https://evil.example/\"&gt;" in shown and "\\u202e" in shown and "&#37;{customdata}" in shown
    assert "&amp;lt;" in shown  # an entity in a name shows as itself, not as what it stands for
    assert json.dumps(shown)[1:-1] in hostile
    assert hostile.replace(json.dumps(shown)[1:-1], json.dumps(report.plot_text(
        findings.broker_label(_stay("C", "b"))))[1:-1]) == plain


def test_a_peer_s_controls_and_markup_in_the_page_s_tables_show_escaped() -> None:
    """The brokers table (and every other: inputs, answers' remarks, clients, the controller's)
    wrote a name's U+202E, ESC and U+2028 raw: the override turned the rest of its cell around.
    Each is its escape now, as on the console, and HTML's specials are entities."""
    row = dict.fromkeys(report.BROKERS_CSV_COLUMNS) | {"cluster": HOSTILE_CLUSTER, "broker_name": HOSTILE_NAME}
    table = report._brokers([row])
    assert not any(ch in table for ch in "\u202e\x1b\u2028")
    assert "\\u202e" in table and "\\x1b[2J" in table and "\\u2028" in table
    assert "<a href" not in table and "&lt;a href=&quot;https://evil.example/&quot;&gt;" in table
    remark = report._response_codes([{"code_name": "GET_ROUTEINFO_BY_TOPIC", "response_code": 17,
                                      "response_name": "TOPIC_NOT_EXIST", "remark": "no\u202eroute</td>",
                                      "count": 1, "requesters": {"10.0.0.1:4\u2028": 1}}])
    assert "\u202e" not in remark and "\u2028" not in remark and "no\\u202eroute&lt;/td&gt;" in remark


def _registrations_named(name_escape: bytes) -> bytes:
    """A classic pcap of a broker registering three times, answered, under names whose JSON header
    holds ``name_escape`` as written (``\\ud800``: a lone surrogate, which JSON carries and the
    NameServer keeps), and so does its answer's remark and its language."""
    import struct

    from tests.spark.capture.builders import BODY, CLIENT, SERVER, ethernet, ipv4, pcap, tcp
    from twisted_namesrv.remoting import RemotingCommand, RequestCode
    from twisted_namesrv.remoting.codes import V4_9_8
    from twisted_namesrv.remoting.crc import crc32_masked

    def named(frame: bytes) -> bytes:
        (word,) = struct.unpack(">I", frame[4:8])
        header, body = frame[8:8 + word], frame[8 + word:]
        header = header.replace(b"NAME", name_escape)
        return struct.pack(">II", 4 + len(header) + len(body), len(header)) + header + body

    ext = {"brokerAddr": "10.0.0.9:10911", "brokerName": "bNAME", "clusterName": "CNAME", "brokerId": "0",
           "compressed": "false", "bodyCrc32": str(crc32_masked(BODY))}
    frames, t, seqs = [], 1_700_000_000.0, {CLIENT: 1001, SERVER: 5001}

    def send(src: tuple[str, int], dst: tuple[str, int], flags: int, payload: bytes = b"") -> None:
        nonlocal t
        t += 0.01
        frames.append((t, ethernet(ipv4(src[0], dst[0], tcp(src, dst, seqs[src] - (flags == 0x02), flags, payload,
                                                                seqs[dst])))))
        seqs[src] += len(payload)

    send(CLIENT, SERVER, 0x02)
    send(SERVER, CLIENT, 0x12)
    send(CLIENT, SERVER, 0x10)
    for opaque in (1, 2, 3):
        request = RemotingCommand.request(RequestCode.REGISTER_BROKER, ext, BODY, opaque=opaque, version=V4_9_8,
                                          language="JAVANAME")
        send(CLIENT, SERVER, 0x18, named(request.encode()))
        send(SERVER, CLIENT, 0x18, named(RemotingCommand.response_to(request, remark="okNAME").encode()))
        t += 30
    return pcap(frames)


def test_a_name_holding_a_lone_surrogate_is_written_as_java_writes_it(spark, tmp_path) -> None:
    """JSON carries a lone surrogate (``"\\ud800"``), the NameServer keeps it in a broker's name (Java's
    does too), and Arrow's and the CSV files' text is UTF-8, which cannot: one such registration in a
    capture stopped the whole report (UnicodeEncodeError in a decoding task, 165 lines of Spark's
    traceback, exit 1). Every table and file is written now, each such name as Java writes it to
    its peers (String.getBytes: ``?``), the page and summary.json too."""
    from tests.spark.conftest import run_job

    path = tmp_path / "surrogate.pcap"
    path.write_bytes(_registrations_named(b"\\ud800"))
    outputs = run_job(spark, [str(path)], tmp_path / "out", report=True)
    assert [(row["cluster"], row["broker_name"]) for row in outputs.brokers] == [("C?", "b?")]
    assert {(row["broker_name"], row["cluster"]) for row in outputs.registrations} == {("b?", "C?")}
    assert [(b["cluster"], b["broker_name"]) for b in outputs.summary["brokers"]] == [("C?", "b?")]
    assert "C? / b? / 0 (MASTER)" in (tmp_path / "out" / "report.html").read_text()


#: a topic as long as a capture showed one (a lookup of a 20,000-character name, refused by the server)
LONG_TOPIC = "T" * 20_000


def test_a_long_name_is_clipped_in_the_findings_lines_and_kept_whole_in_their_fields() -> None:
    """A route lookup of a 20,000-character topic was a 20,000-character line on the console, in
    summary.json's ``message`` and on the page. Each line shows the first 256 characters and how long
    the name was (the audit trail's rule, escapes.clipped_text); the fields keep the name exact."""
    from twisted_namesrv.escapes import SHOWN_MAX

    marked = "\x1b" + LONG_TOPIC  # a name repr writes escaped (``'\\x1b'``) is clipped in the line too
    items = [findings._unknown_topic("10.0.0.1:50000", LONG_TOPIC, 3, 1.0, 2.0, None),
             findings._unknown_topic("10.0.0.2:50000", marked, 1, 1.0, 2.0, None)]
    lone = findings._unknown_topic("10.0.0.3:50000", LONG_TOPIC + "2", 1, 1.0, 2.0, None, 1.5)
    found = findings.attention([*items, lone])["findings"]
    lines = [f["message"] for f in found] + [item["message"] for f in found for item in f["evidence"]]
    assert len(lines) == 5 and all(len(line) < 1024 for line in lines), [len(line) for line in lines]
    warning = next(f for f in found if f["kind"] == "topic_not_exist")
    assert f"{'T' * SHOWN_MAX}...(20000 characters)" in warning["message"]
    assert "\\x1b" + "T" * (SHOWN_MAX - 1) + "...(20001 characters)" in warning["message"]
    assert [item["topic"] for item in warning["evidence"]] == [LONG_TOPIC, marked]
    told = next(f for f in found if f["kind"] == "topic_made_on_first_use")
    assert told["message"].count("...(20001 characters)") == 1 and told["evidence"][0]["topic"] == LONG_TOPIC + "2"
    assert len(report._findings(found)) < 4 * 1024


def _csp_run(page: Path, tmp_path: Path, name: str) -> tuple[str, str]:
    """The page's DOM once its scripts ran in headless Chromium, and what its console said."""
    import subprocess

    from tests.web.test_status_page import chromium

    flags = [chromium(), "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars", "--window-size=1400,2400",
             "--virtual-time-budget=10000", f"--user-data-dir={tmp_path / f'profile-{name}'}",
             "--enable-logging=stderr", "--v=0", "--dump-dom", page.as_uri()]
    done = subprocess.run(flags, capture_output=True, text=True, timeout=180, check=True)
    return done.stdout, "\n".join(line for line in done.stderr.splitlines() if ":CONSOLE" in line)


#: what an escaping bug would let a capture's name put in the page: a script and an event handler
INJECTED = ("<script>document.body.setAttribute('data-ran', 'script')</script>"
            "<img src=x onerror=\"document.body.setAttribute('data-ran-handler', 'img')\">")


#: what the modebar's "download plot as png" calls (Plotly.toImage draws the figure's SVG from a blob:), its
#: PNG's start said on <body>
TO_IMAGE = ("window.addEventListener('load', function () { setTimeout(function () { Plotly.toImage("
            "document.getElementById('plot-requests'), {format: 'png', width: 400, height: 300}).then("
            "function (url) { document.body.setAttribute('data-png', url.slice(0, 30)); }, "
            "function (e) { document.body.setAttribute('data-png', 'failed: ' + e); }); }, 500); });")


def test_the_page_s_policy_runs_its_own_scripts_and_no_other(synthetic_outputs, tmp_path) -> None:
    """Escaping was all that stood between a capture's name and a script: report.html had no
    Content-Security-Policy. Its own scripts (plotly.js, the figures) now run by their hashes, every
    plot drawn with no violation said on the console, Plotly's PNG made, while a script and an ``onerror`` put inside
    the findings (as an escaping bug would) are refused; a copy without the policy runs them (the
    check sees a script run)."""
    text = Path(synthetic_outputs.out, "report.html").read_text()
    at = text.index("<section id='findings'>")
    hostile = text[:at] + INJECTED + text[at:]
    for name, page in (("injected", hostile), ("unguarded", hostile.replace("http-equiv='Content-Security-Policy'",
                                                                           "name='no-policy'", 1))):
        (tmp_path / f"{name}.html").write_text(page)
        dom, console = _csp_run(tmp_path / f"{name}.html", tmp_path, name)
        body = dom[dom.index("<body"):dom.index(">", dom.index("<body"))]
        if name == "injected":
            assert "data-ran" not in body and "Content Security Policy" in console, body
        else:
            assert "data-ran=\"script\"" in body and "data-ran-handler=\"img\"" in body, body
    head = text[:text.index("</head>")]
    assert "http-equiv='Content-Security-Policy'" in head
    policy = head[head.index("content=\"") + 9:]
    policy = policy[:policy.index('"')]
    directives = dict(part.strip().split(" ", 1) for part in policy.split(";"))
    assert directives["default-src"] == "'none'" and "unsafe" not in directives["script-src"]
    assert len(directives["script-src"].split()) == text.count("<script") == 2 + 5  # config, plotly.js, 5 figures
    # the page as written, with one more script of its own (its hash added): the modebar's "download plot as png"
    probe = _hash(TO_IMAGE.encode())
    (tmp_path / "own.html").write_text(text.replace("script-src ", f"script-src {probe} ", 1).replace(
        "</body>", f"<script>{TO_IMAGE}</script></body>", 1))
    dom, console = _csp_run(tmp_path / "own.html", tmp_path, "own")
    for plot in ("timeline", "intervals", "topics", "requests", "latency"):
        div = dom[dom.index(f'id="plot-{plot}"'):]
        assert 'class="main-svg"' in div[:div.index("</svg>")], f"{plot} not drawn"
    assert "Content Security Policy" not in console, console
    assert 'data-png="data:image/png;base64,' in dom[dom.index("<body"):dom.index(">", dom.index("<body"))]
