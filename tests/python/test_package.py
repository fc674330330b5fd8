# SPDX-License-Identifier: Apache-2.0
"""What an installed krex package offers besides the protocol: TypeError for
wrong-typed keywords, every option of krex::options (its one table,
include/krex/detail/option_table.hpp) and every report field, signatures in help(),
krex.Error's docstring, the .pyi stubs and py.typed, and a CUDA-built module
that says in words when it sees no device."""

import ast
import inspect
import os
import pydoc

import krex
import krex._krex
from pyutil import Child, cleanup, unique_name


def _options_krex_accepts():
    """The keyword options the binding accepts, from its own 'unknown option' hint."""
    try:
        krex.Tenant(colour="red")
    except krex.Error as e:
        assert e.hint.startswith("accepted: "), e.hint
        return [o.strip() for o in e.hint[len("accepted: "):].split(",")]
    raise AssertionError("an unknown option was accepted")


def _type_error(fn, *fragments):
    try:
        fn()
    except TypeError as e:
        assert not isinstance(e, krex.Error), e
        for f in fragments:
            assert f in str(e), "%r not in %r" % (f, str(e))
        return
    except krex.Error as e:
        raise AssertionError("krex.Error, expected TypeError: %s" % e)
    raise AssertionError("no TypeError raised")


def test_wrong_typed_keywords_raise_type_error():
    # Raised while the options are read, before anything joins.
    _type_error(lambda: krex.Tenant(pin="yes"), "'pin'", "True or False", "str")
    _type_error(lambda: krex.Tenant(device=True), "'device'", "int", "bool")
    _type_error(lambda: krex.Tenant(1.5), "'device'", "float")
    _type_error(lambda: krex.Tenant(lease_ms="5000"), "'lease_ms'", "int", "'5000'")
    _type_error(lambda: krex.Tenant(freeze=3), "'freeze'", "cgroup2", "int")
    _type_error(lambda: krex.Tenant(segment=7), "'segment'", "str")
    _type_error(lambda: krex.Tenant(gate_contexts=1), "'gate_contexts'", "True or False")
    _type_error(lambda: krex.region("t"), "krex.Tenant", "str")
    # The right type with a value krex refuses stays a krex.Error.
    for bad in (dict(freeze="sometimes"), dict(device=99), dict(lease_ms=0)):
        try:
            krex.Tenant(**bad)
        except krex.Error as e:
            assert e.step == "options", e
        else:
            raise AssertionError("accepted %r" % bad)


def test_every_option_of_krex_options_reaches_python():
    accepted = _options_krex_accepts()
    for o in ("gate_contexts", "release_on_leave", "handoff_grace_ms", "host_devices", "gating"):
        assert o in accepted, (o, accepted)
    # gate_contexts is read (not 'unknown'): the lease_ms after it is what fails.
    try:
        krex.Tenant(gate_contexts=False, lease_ms=0)
    except krex.Error as e:
        assert "lease" in str(e) and "unknown" not in str(e), e
    else:
        raise AssertionError("lease_ms=0 accepted")


def _keywords_missing(table, accepted):
    """The table's keywords the binding does not accept, and the reverse."""
    want = [row["python"] for row in table]
    return [k for k in want if k not in accepted] + [k for k in accepted if k not in want]


def _python_value(row):
    """The table row's default as a Python value of the keyword's type."""
    d = row["default"]
    if row["type"] == "int":
        return int(d)
    if row["type"] == "bool":
        return d == "True"
    return "" if d == "<derived>" else d.strip('"')


def test_every_option_of_the_table_reaches_python():
    # include/krex/detail/option_table.hpp, as the binding exports it: the
    # keywords it accepts are exactly the table's, in its order; each takes
    # its default (device_count reads the options without joining), refuses
    # a float with a TypeError naming it, and has a typed entry with its
    # default in help(krex.Tenant).
    table = krex._krex._option_table
    accepted = _options_krex_accepts()
    assert accepted == [row["python"] for row in table], (accepted, table)
    assert not _keywords_missing(table, accepted)
    # A planted drift: an option the binding would not take is named.
    assert _keywords_missing(table + [{"python": "colour"}], accepted) == ["colour"]
    assert _keywords_missing(table[1:], accepted) == [table[0]["python"]]
    text = pydoc.render_doc(krex.Tenant, renderer=pydoc.plaintext)
    for row in table:
        kw = row["python"]
        krex._krex.device_count(**{kw: _python_value(row)})
        _type_error(lambda: krex._krex.device_count(**{kw: 1.5}), "'%s'" % kw, "float")
        if kw != "device":
            entry = "%s: %s = %s" % (kw, row["type"], row["default"])
            assert entry in text, (entry, text)


def test_report_has_every_field_of_the_list():
    # r.report's keys are detail::visit_report_fields' (krex._krex._report_fields), in order.
    fields = krex._krex._report_fields
    assert fields[0] == "level" and "gate_ns" in fields and "other_segments" in fields, fields
    name = unique_name("pyfields")
    c = Child("""
        t = krex.Tenant(segment=sys.argv[1], freeze="none", pin=False, confine=False)
        with krex.region(t) as r:
            inside = list(r.report)
        say("keys", {"inside": inside, "after": list(r.report)})
        t.leave()
    """, args=[name])
    try:
        got = c.expect("keys")
        assert got["inside"] == fields and got["after"] == fields, (got, fields)
        assert c.wait() == 0
    finally:
        cleanup(name, [c])


def test_help_shows_signatures_and_every_option():
    text = pydoc.render_doc(krex.Tenant, renderer=pydoc.plaintext)
    for sig in ("__init__(self", "Tenant(device: int = 0, *,", "leave(self",
                "submit(self", "fn"):
        assert sig in text, (sig, text)
    for o in _options_krex_accepts():
        assert "%s: " % o in text, ("option %s has no typed entry in help(krex.Tenant)" % o, text)
    # The Python-level API has real signatures.
    assert str(inspect.signature(krex.measure)).startswith("(r, fn, warmup=3, samples=50")
    assert "tenant" in str(inspect.signature(krex.region))
    for fn in (krex.patch, krex.unpatch, krex.process_tenant, krex.last_report):
        assert fn.__doc__, fn
    region_doc = pydoc.render_doc(krex._krex.Region, renderer=pydoc.plaintext)
    assert "enter() -> None" in region_doc and "exit() -> None" in region_doc, region_doc


def test_error_has_a_docstring_naming_its_attributes():
    doc = krex.Error.__doc__ or ""
    for word in ("step", "hint", "code", "RuntimeError", "TypeError"):
        assert word in doc, (word, doc)


def _stub(name):
    path = os.path.join(os.path.dirname(krex.__file__), name)
    assert os.path.isfile(path), "%s is not installed next to krex/__init__.py" % name
    with open(path) as f:
        return ast.parse(f.read(), path)


def _top_level_names(tree):
    names = set()
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.ClassDef)):
            names.add(node.name)
        elif isinstance(node, ast.AnnAssign):
            names.add(node.target.id)
        elif isinstance(node, ast.ImportFrom):  # re-exported: `import X as X` (PEP 484)
            names.update(a.name for a in node.names if a.asname == a.name)
    return names


def test_stubs_and_py_typed_match_the_package():
    assert os.path.isfile(os.path.join(os.path.dirname(krex.__file__), "py.typed"))
    ext = _stub("_krex.pyi")
    public = {n for n in dir(krex._krex) if not n.startswith("_")}
    stubbed = {n for n in _top_level_names(ext) if not n.startswith("_")}
    assert public == stubbed, ("_krex.pyi and krex._krex differ", public ^ stubbed)
    # The stub's Tenant takes exactly the options the binding accepts.
    tenant = next(n for n in ext.body if isinstance(n, ast.ClassDef) and n.name == "Tenant")
    init = next(n for n in tenant.body if isinstance(n, ast.FunctionDef) and n.name == "__init__")
    stub_options = [a.arg for a in init.args.kwonlyargs]
    assert sorted(stub_options) == sorted(o for o in _options_krex_accepts() if o != "device"), \
        stub_options
    pkg = _top_level_names(_stub("__init__.pyi"))
    missing = [n for n in krex.__all__ + ["__version__"] if n not in pkg]
    assert not missing, ("__init__.pyi lacks", missing)


def test_a_module_without_a_device_says_so():
    # CUDA_VISIBLE_DEVICES="" hides every GPU: a CUDA-built module must say it
    # sees no device and how to get the host backend (not "use a device in
    # 0..-1"); the host backend does not care and joins.
    name = unique_name("pynodev")
    c = Child("""
        try:
            t = krex.Tenant(segment=sys.argv[1], freeze="none", pin=False, confine=False)
            say("joined", t.device)
            t.leave()
        except krex.Error as e:
            say("error", {"msg": str(e), "step": e.step, "hint": e.hint})
    """, env={"CUDA_VISIBLE_DEVICES": ""}, args=[name])
    try:
        if krex.backend == "host":
            assert c.expect("joined") == 0
        else:
            got = c.expect("error")
            assert got["step"] == "options", got
            assert "sees no device" in got["msg"] and "0..-1" not in got["msg"], got
            assert "KREX_WITH_CUDA=OFF" in got["hint"], got
        assert c.wait() == 0
    finally:
        cleanup(name, [c])


if __name__ == "__main__":
    import run_tests
    raise SystemExit(run_tests.main([os.path.abspath(__file__)]))
