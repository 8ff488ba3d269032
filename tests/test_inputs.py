"""Every input file, one way: garbage in any file a command or option reads is one line and exit 2."""

from __future__ import annotations

import json
import shutil

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from fieldeval.benchmarks.ebs.suite import load_suite
from fieldeval.benchmarks.ibf.corpus import load_corpus
from fieldeval.cli import main
from fieldeval.errors import UsageError
from fieldeval.settings import load_prices
from scorers.ibf import DIMENSIONS
from tests.conftest import TINY_ENUMS, TINY_SELECTOR
from tests.ebs_project import ARGS, make_project

HUGE = 200_000  # over csv's default field limit of 131,072 characters
GARBAGE = st.one_of(
    st.binary(max_size=300),
    st.binary(max_size=100).map(lambda b: b + b"\x00" + b),  # NUL: binary content
    st.just(b""), st.just(b"\xef\xbb\xbf"), st.just(b"\r\n\r\n"), st.just(b"\xff\xfe\x00h\x00i"),
    st.text(max_size=100).map(lambda t: ("\ufeff" + t.replace("\n", "\r\n")).encode()),  # BOM and CRLF
    st.just(("a\tb\n" + "x" * HUGE + "\ty\n").encode()),  # a huge field in a table that is not the one asked for
)
FEW = settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])


def one_usage_line(capsys, code: int, path, *, or_says: str = "\0") -> None:
    err = capsys.readouterr().err
    assert code == 2, err
    assert len(err.strip().splitlines()) == 1 and err.startswith("fieldeval: "), err
    assert (str(path) in err or or_says in err) and "Traceback" not in err


RESULTS_HEADER = "model\tcase_ideal\tresponse_text\tsampleData\n"
RESULTS_ROW = "m\tforest biome [ENVO:01000174]\tforest biome [ENVO:01000174]\tsoil_data\n"


@FEW
@given(data=GARBAGE)
def test_score_commands_refuse_garbage_in_one_line(tmp_path_factory, capsys, data):
    path = tmp_path_factory.mktemp("in") / "table.tsv"
    path.write_bytes(data)
    for argv in (["score", "ebs", str(path), "--ontology", TINY_SELECTOR], ["score", "re", str(path)],
                 ["score", "ibf", str(path)], ["generate", "ebs", str(path), "-o", str(path.with_suffix(".yaml"))]):
        # score ebs names its missing columns the way the ebs tables module words it
        one_usage_line(capsys, main(argv), path, or_says="results table is missing column(s)")


@FEW
@given(data=GARBAGE)
@example(data=b"id\tlabel\n" + b"\x00" * 3)
def test_enum_dir_refuses_a_garbage_value_set_in_one_line(tmp_path_factory, capsys, data):
    folder = tmp_path_factory.mktemp("enums")
    shutil.copytree(TINY_ENUMS, folder, dirs_exist_ok=True)
    (folder / "soil_env_broad_scale.tsv").write_bytes(data)
    results = folder / "results.tsv"
    results.write_text(RESULTS_HEADER + RESULTS_ROW)
    one_usage_line(capsys, main(["score", "ebs", str(results), "--enum-dir", str(folder), "--ontology", TINY_SELECTOR]),
                   folder / "soil_env_broad_scale.tsv")


@FEW
@given(data=GARBAGE)
def test_option_files_refuse_garbage(tmp_path_factory, data):
    path = tmp_path_factory.mktemp("in") / "file"
    path.write_bytes(data)
    for load in (load_suite, load_corpus):
        with pytest.raises(UsageError, match=str(path)):
            load(path)
    try:
        load_prices({}, str(path))
    except UsageError as error:
        assert str(path) in str(error) and "\n" not in str(error)


def test_bom_and_crlf_read_as_plain_utf8(tmp_path, capsys):
    rows = ["\t".join(["item_id", *DIMENSIONS, "model"]), "ci_1\t4\t3\t2\t1\t0\tphi"]
    plain, marked = tmp_path / "plain.tsv", tmp_path / "marked.tsv"
    plain.write_text("\n".join(rows) + "\n", encoding="utf-8")
    marked.write_bytes(("\ufeff" + "\r\n".join(rows) + "\r\n").encode())
    outputs = []
    for path in (plain, marked):
        assert main(["score", "ibf", str(path), "--json"]) == 0
        outputs.append(json.loads(capsys.readouterr().out))
    assert outputs[0] == outputs[1] and outputs[0]["model_name"] == "phi"  # the BOM once hid the first column


def test_fields_longer_than_csv_default_limit_are_read(tmp_path, capsys):
    path = tmp_path / "scores.tsv"
    path.write_text("\t".join(["item_id", *DIMENSIONS, "response_text"]) + "\n"
                    + "\t".join(["ci_1", "4", "3", "2", "1", "0", "x" * HUGE]) + "\n")
    assert main(["score", "ibf", str(path), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["total_items"] == 1


def test_bad_output_paths_are_refused_before_any_work(tmp_path, capsys):
    results = tmp_path / "results.tsv"
    results.write_text(RESULTS_HEADER + RESULTS_ROW)
    one_usage_line(capsys, main(["score", "ebs", str(results), "-o", str(results)]), results)
    one_usage_line(capsys, main(["generate", "ebs", str(results), "-o", str(tmp_path)]), tmp_path)


def test_empty_suite_is_a_usage_error(tmp_path):
    path = tmp_path / "suite.yaml"
    path.write_text("name: empty\ntemplates: {t: {system: s, prompt: '{input}'}}\ncases: []\n")
    with pytest.raises(UsageError, match="the suite has no cases"):
        load_suite(path)


@pytest.mark.parametrize(("case", "named"), [
    ("{input: 'q', ideal: 'forest biome [ENVO:01000174]', tags: [[soil_data, x]]}", "tags[0]"),
    ("{input: ['q'], ideal: 'forest biome [ENVO:01000174]', tags: [soil_data]}", "input must be text, not list"),
    ("{input: 'q', ideal: 7, tags: [soil_data]}", "ideal must be text, not int"),
])
def test_a_suite_with_malformed_cases_is_not_an_llm_matrix_suite(tmp_path, case, named):
    # tags that are nested lists gave an INTERNALERROR
    path = tmp_path / "suite.yaml"
    path.write_text(f"name: s\ntemplates: {{t: {{system: s, prompt: '{{input}}'}}}}\ncases: [{case}]\n")
    with pytest.raises(UsageError, match=r"not an llm-matrix suite \(TypeError: case 0: ") as error:
        load_suite(path)
    assert named in str(error.value)


@pytest.mark.parametrize("option", ["--ebs-suite", "--prices", "--enum-dir-file"])
def test_a_binary_option_file_ends_the_session_in_one_line(pytester, option):
    project = make_project(pytester)
    binary = project.path / "binary.bin"
    binary.write_bytes(bytes(range(256)) * 8)
    args = list(ARGS)
    if option == "--enum-dir-file":
        shutil.copytree(TINY_ENUMS, project.path / "enums")
        shutil.copy(binary, project.path / "enums" / "soil_env_broad_scale.tsv")
        args[args.index("--enum-dir") + 1] = "enums"
    else:
        args += [option, str(binary)]
    result = project.runpytest_subprocess(*args)
    assert result.ret == 2
    assert "Traceback" not in result.stderr.str() + result.stdout.str()
    result.stderr.fnmatch_lines(["Exit: *binary content (NUL byte at offset 0), not a text file*"])


@pytest.mark.parametrize("text", [
    "a\tb\tc\n1\t2\t3\n\n4\t5\n6\t7\t8\t9\n\"x\ty\"\t\"q\"\"\"\t\n",  # blank line, short row, long row, quoting
    "\ufeffa\t b \r\n1\t2\r\n",  # BOM, CRLF, a padded header
    "a\tb\n",  # header only
    "a\ta\n1\t2\n",  # a repeated column name
    "a\tb\n1\t2\n\n\t4\n5\t\n",  # no quote anywhere, a blank line, empty cells: split in one pass
    "a\tb\r1\t2\r3\t4",  # CR line ends, no last line end
    "a\tb\n1\t2\n3\n",  # no quote, one short row: csv's rules
])
def test_tsv_frame_reads_as_read_tsv_does(tmp_path, text):
    """The frame reader (`score ebs`, `score microbiorel`) keeps read_tsv's rules for every cell."""
    import pandas as pd

    from fieldeval.inputs import read_tsv, read_tsv_frame

    path = tmp_path / "t.tsv"
    path.write_text(text, encoding="utf-8", newline="")
    columns, rows = read_tsv(path, what="T")
    expected = pd.DataFrame(rows, columns=columns, dtype=str).fillna("")
    frame = read_tsv_frame(path, what="T")
    assert list(frame.columns) == columns
    assert frame.astype(object).values.tolist() == expected.astype(object).values.tolist()


@settings(max_examples=200)
@given(st.lists(st.lists(st.text(st.characters(blacklist_characters='\t\n\r"\x00', blacklist_categories=("Cs",)),
                                 max_size=4), min_size=1, max_size=4), min_size=1, max_size=6),
       st.booleans())
def test_an_unquoted_tsv_frame_reads_as_read_tsv_does(tmp_path_factory, rows, blank):
    """Tables without a double quote (read in one pass when every row is as wide as the header) give the cells
    csv.DictReader gives, ragged or not."""
    import pandas as pd

    from fieldeval.inputs import read_tsv, read_tsv_frame

    header = [f"c{i}" for i in range(len(rows[0]))]
    lines = ["\t".join(header), *("\t".join(row) for row in rows[1:])]
    if blank:
        lines.insert(min(2, len(lines)), "")
    path = tmp_path_factory.mktemp("tsv") / "t.tsv"
    path.write_text("\n".join(lines) + "\n", encoding="utf-8", newline="")
    columns, expected_rows = read_tsv(path, what="T")
    expected = pd.DataFrame(expected_rows, columns=columns, dtype=str).fillna("")
    frame = read_tsv_frame(path, what="T")
    assert list(frame.columns) == columns
    assert frame.astype(object).values.tolist() == expected.astype(object).values.tolist()
