"""Make tests/data/java_properties.json: what Java's own java.util.Properties does with the cases
of the properties codec (twisted_namesrv/properties.py), for tests/test_properties_codec.py.

    python tools/java_properties_table.py            # needs javac and java (17) on PATH

For each ``LOAD_CASES`` text: the keys and values ``Properties.load(Reader)`` reads, or the
exception it throws.  For each ``STORE_CASES`` key and value: the line ``Properties.store`` writes
(to a Writer, and to an OutputStream: ISO-8859-1 with ``\\uXXXX``), the lines our ``dump_line``
writes (plain and ``ascii_only``), and what Java's load reads back from ours.  The Java program is
written to a temporary directory, compiled and run there: nothing of it stays in the repository.
Texts cross to Java as hex UTF-16 units, so lone surrogates survive the trip.
"""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from twisted_namesrv.properties import dump_line  # noqa: E402

TABLE = REPO / "tests" / "data" / "java_properties.json"
#: the line separators str.splitlines() knows beyond Java's \n, \r, \r\n (the hole of issue 44)
SEPARATORS = ["\u2028", "\u2029", "\u0085", "\x0b", "\x0c", "\x1c", "\x1d", "\x1e"]
ATTACK = "productEnvName=x{s}aclEnable=false{s}kvConfigPath=/tmp/evil{s}listenPort=1\n"

LOAD_CASES: list[str] = [
    "", "\n", "   \n\t\f\n", "# only a comment", "! only a comment\n",
    "a=1\nb : 2\nc 3\n  d\t=\t4 \ne=\nf\ng==x\nh=value # not a comment\n",
    "a = = b\n", "a==b\n", "a:=b\n", "a :b\n", "a\tb\n", "a\fb\n", "=v\n", ":v\n", " =v\n", "a\\ b c\n",
    "a\\=b=c\n", "a\\\\=b\n", "a\\:b:c\n", "a\\\tb=c\n", "a\\tb=c\n", "#k=v\n", "\\#k=v\n", "k\\#=v\n",
    "list=a,\\\n    b,\\\n\tc\nnext=1\n", "odd=x\\\\\nafter=2\n", "tail=x\\", "tail=x\\\\", "tail=x\\\\\\",
    "\\", "\\\n", "\\\r", "\\\r\n", "\\\n\n", "\\\nx=1\n", "\\\n#c\nx=1\n", "\\\n  # c\nx=1\n",
    "a\\\n#c\n", "a\\\n  \nb=1\n", "a\\\r\nb\n", "a\\\r\rb\n", "a\\\n\rb\n", "a\\\n\r\nb\n", "a\\\n", "a\\\r",
    "a\\\r\n", "a\\\n   ", "\\\n   ", "# c\\\nx=1\n", "  ! c\\\nx=1\n", "x=1\r\ny=2\rz=3\n", "\r\n\r\nx=1",
    "k=\\t\\n\\r\\f\\q\\\\\n", "k=\\u0041\\u00e9\\u00E9\n", "k=\\uD83C\\uDF89\n", "k=\\ud800\n", "k=\\udf89\\ud83c\n",
    "k=\\\\u0041\n", "k=\\u00\n", "k=\\u12", "k=\\uXYZW\n", "k=\\u+123\n", "k=\\u 123\n", "k=\\u00412\n",
    "\\u0041\\u003d=v\n", "k\\u0020x=v\n", "   a=b\n", "\t\fa=b\n", "a=  \\  b\n", "a=b\\ \n",
    "k=é\n", "k=🎉\n", "é=k\n", "dup=1\ndup=2\n", "k=\x00\x01\x7f\n", "k\x00x=v\n",
    "k=x\x0cy=1\n", "k=x\ty=1\n",
    *(ATTACK.format(s=s) for s in SEPARATORS),
    *(ATTACK.format(s=f"\\u{ord(s):04x}") for s in SEPARATORS),
    *(ATTACK.format(s=s) for s in ("\n", "\r", "\r\n")),
    *(ATTACK.format(s=f"\\u{ord(s):04x}") for s in ("\n", "\r")),
]
STORE_CASES: list[tuple[str, str]] = [
    ("k", ""), ("k", "plain"), ("k", " lead"), ("k", "  two"), ("k", "trail "), ("k", "a=b:c#d!e"), ("k", "#x"),
    ("k", "!x"), ("k", "\\"), ("k", "a\\"), ("k", "\t\n\r\f"), ("k", "\x00\x01\x1b[2J\x7f\x9f"), ("k", "\u202eevil"),
    ("k", "é"), ("k", "🎉"), ("k", "\ud800"), ("k", "\udf89x"), ("k", "\ufeff"),
    *(("productEnvName", ATTACK.format(s=s).rstrip("\n")) for s in [*SEPARATORS, "\n", "\r", "\r\n"]),
    ("a b", "v"), ("#k", "v"), ("!k", "v"), ("k=:", "v"), ("", "v"), ("", ""), ("é", "v"), ("k\u2028x", "v"),
    (" k", "v"), ("k ", "v"), ("\tk", "v"), ("k\\", "v"), ("nsaddrList", "10.0.0.1:9876;10.0.0.2:9876"),
]

JAVA = r"""
import java.io.*;
import java.nio.charset.StandardCharsets;
import java.nio.file.*;
import java.util.*;

public class PropertiesTable {
    static String hex(String s) {
        StringBuilder b = new StringBuilder();
        for (char c : s.toCharArray()) b.append(String.format("%04x", (int) c));
        return b.toString();
    }
    static String unhex(String h) {
        StringBuilder b = new StringBuilder();
        for (int i = 0; i < h.length(); i += 4) b.append((char) Integer.parseInt(h.substring(i, i + 4), 16));
        return b.toString();
    }
    static String loaded(String text) {
        Properties p = new Properties();
        try {
            p.load(new StringReader(text));
        } catch (Exception e) {
            return "ERR " + hex(e.getClass().getName() + ": " + e.getMessage());
        }
        StringBuilder b = new StringBuilder("OK");
        for (String k : new TreeSet<>(p.stringPropertyNames())) {
            b.append(" ").append(hex(k)).append(":").append(hex(p.getProperty(k)));
        }
        return b.toString();
    }
    static String withoutDate(String stored) {
        return stored.substring(stored.indexOf('\n') + 1);
    }
    public static void main(String[] args) throws Exception {
        for (String line : Files.readAllLines(Paths.get(args[0]))) {
            String[] f = line.split(" ", -1);
            if (f[0].equals("L")) {
                System.out.println(loaded(unhex(f[1])));
            } else {
                Properties p = new Properties();
                p.setProperty(unhex(f[1]), unhex(f[2]));
                StringWriter w = new StringWriter();
                p.store(w, null);
                ByteArrayOutputStream o = new ByteArrayOutputStream();
                p.store(o, null);
                System.out.println("W " + hex(withoutDate(w.toString())) + " "
                    + hex(withoutDate(new String(o.toByteArray(), StandardCharsets.ISO_8859_1))));
            }
        }
    }
}
"""


def hexed(text: str) -> str:
    return text.encode("utf-16-be", "surrogatepass").hex()


def unhexed(text: str) -> str:
    return bytes.fromhex(text).decode("utf-16-be", "surrogatepass")


def java_answers(cases: list[str], work: Path) -> list[str]:
    (work / "PropertiesTable.java").write_text(JAVA)
    subprocess.run(["javac", "-d", str(work), str(work / "PropertiesTable.java")], check=True)
    (work / "cases.txt").write_text("\n".join(cases) + "\n")
    done = subprocess.run(["java", "-cp", str(work), "PropertiesTable", str(work / "cases.txt")], check=True,
                          capture_output=True, text=True)
    return done.stdout.splitlines()


def loaded(answer: str) -> dict[str, object]:
    kind, _, rest = answer.partition(" ")
    if kind == "ERR":
        return {"error": unhexed(rest)}
    pairs = (item.split(":") for item in rest.split(" ") if item)
    return {"loaded": {unhexed(k): unhexed(v) for k, v in pairs}}


def java_version() -> str:
    done = subprocess.run(["java", "-version"], capture_output=True, text=True, check=True)
    return done.stderr.splitlines()[0]


def main() -> None:
    ours = [(dump_line(k, v), dump_line(k, v, ascii_only=True)) for k, v in STORE_CASES]
    cases = [f"L {hexed(text)}" for text in LOAD_CASES]
    cases += [f"S {hexed(k)} {hexed(v)}" for k, v in STORE_CASES]
    cases += [f"L {hexed(text)}" for pair in ours for text in pair]
    with tempfile.TemporaryDirectory() as work:
        answers = java_answers(cases, Path(work))
    load_answers = answers[:len(LOAD_CASES)]
    store_answers = answers[len(LOAD_CASES):len(LOAD_CASES) + len(STORE_CASES)]
    ours_answers = answers[len(LOAD_CASES) + len(STORE_CASES):]
    table = {
        "made_by": "tools/java_properties_table.py", "java": java_version(),
        "load": [{"text": text, **loaded(answer)} for text, answer in zip(LOAD_CASES, load_answers, strict=True)],
        "store": [],
    }
    for index, ((key, value), answer) in enumerate(zip(STORE_CASES, store_answers, strict=True)):
        _, writer, stream = answer.split(" ")
        table["store"].append({
            "key": key, "value": value, "java_writer": unhexed(writer), "java_stream": unhexed(stream),
            "ours": ours[index][0], "java_loads_ours": loaded(ours_answers[2 * index])["loaded"],
            "ours_ascii": ours[index][1], "java_loads_ours_ascii": loaded(ours_answers[2 * index + 1])["loaded"],
        })
    lines = [f'{{"made_by": {json.dumps(table["made_by"])}, "java": {json.dumps(table["java"])},']
    for part in ("load", "store"):
        rows = ",\n".join(f"  {json.dumps(row)}" for row in table[part])
        lines.append(f' "{part}": [\n{rows}\n ]' + ("," if part == "load" else "}"))
    TABLE.write_text("\n".join(lines) + "\n")
    print(f"{TABLE.relative_to(REPO)}: {len(LOAD_CASES)} texts loaded and {len(STORE_CASES)} pairs stored by "
          f"{table['java']}")


if __name__ == "__main__":
    main()
