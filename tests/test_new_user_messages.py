"""The CLI's messages as a new user met them (issue 27, "Messages"): the option to blame, "did you
mean", the exit code of a file that cannot be read, what a config.json is, the command's own
usage, a checkpoint without a tokenizer, and counts in the number they agree with."""

import re
import sys
import time
from pathlib import Path

import numpy as np
import pytest
from safetensors.numpy import save_file

import tensorloupe
from tensorloupe import cli
from tensorloupe.cli import main
from tensorloupe.display import counted

ROOT = Path(__file__).resolve().parent.parent


def run(capsys, *argv):
    code = main([str(a) for a in argv])
    out, err = capsys.readouterr()
    return code, out, err


@pytest.fixture
def model(tmp_path):
    path = tmp_path / "model.safetensors"
    save_file({"model.embed_tokens.weight": np.arange(12, dtype=np.float32).reshape(4, 3),
               "lm_head.weight": np.ones((4, 3), np.float32)}, str(path))
    return path


def test_a_negative_count_blames_count_not_start(capsys, model):
    code, _, err = run(capsys, "values", model, "lm_head.weight", "--count", "-5")
    assert code == 2
    assert "--count -5" in err and "--start" not in err


def test_a_start_outside_the_tensor_still_blames_start(capsys, model):
    code, _, err = run(capsys, "values", model, "lm_head.weight", "--start", "12")
    assert code == 2 and "--start 12 is outside tensor 'lm_head.weight' of 12 elements" in err


def test_a_mistyped_tensor_name_gets_did_you_mean(capsys, model):
    code, _, err = run(capsys, "values", model, "lm_head.weigth")
    assert code == 2
    assert "no tensor named 'lm_head.weigth': did you mean 'lm_head.weight'?" in err
    code, _, err = run(capsys, "stats", model, "zzzz")
    assert code == 2 and "no tensor named 'zzzz'" in err and "did you mean" not in err


def test_did_you_mean_is_bounded(tmp_path):
    # 22,000 names and a 100,000-character name: no SequenceMatcher over them, the error at once
    names = {f"model.layers.{i}.mlp.weight": np.zeros(1, np.float32) for i in range(22_000)}
    path = tmp_path / "many.safetensors"
    save_file(names, str(path))
    ckpt = tensorloupe.open(path)
    with pytest.raises(tensorloupe.TensorloupeError) as e:
        ckpt.tensor("model.layers.7.mlp.weihgt")
    assert "did you mean 'model.layers.7.mlp.weight'" in str(e.value)
    start = time.perf_counter()
    with pytest.raises(tensorloupe.TensorloupeError) as e:
        ckpt.tensor("x" * 100_000)
    assert time.perf_counter() - start < 1.0 and "did you mean" not in str(e.value)


def _documented_code(text: str, what: str) -> int:
    """The exit code a document gives for `what` (`3 the file cannot be read`)."""
    found = re.search(r"`?(\d)`? " + re.escape(what), " ".join(text.split()))
    assert found, f"no exit code documented for {what!r}"
    return int(found.group(1))


def test_a_missing_path_exits_with_the_documented_code(capsys, tmp_path):
    readme = (ROOT / "README.md").read_text()
    assert _documented_code(readme, "the file cannot be read") == \
        _documented_code(cli.__doc__, "the file cannot be read") == cli.EXIT_INVALID == 3
    for command in ("inspect", "stats", "health", "tokens"):
        code, _, err = run(capsys, command, tmp_path / "nothing.safetensors")
        assert code == 3, command
        assert "nothing.safetensors: cannot open the file: No such file or directory" in err
        assert "Traceback" not in err


def test_inspect_of_a_config_json_says_what_it_is(capsys, tmp_path):
    config = tmp_path / "config.json"
    config.write_text('{"model_type": "llama"}')
    code, _, err = run(capsys, "inspect", config)
    assert code == 2 and "only index files" not in err
    assert "config.json: this is the model's configuration (config.json), not a checkpoint" in err
    tokenizer = tmp_path / "tokenizer.json"
    tokenizer.write_text("{}")
    code, _, err = run(capsys, "inspect", tokenizer)
    assert code == 2 and "this is the tokenizer (tokenizer.json), not a checkpoint" in err


def test_an_unknown_option_prints_the_commands_usage(capsys, model):
    with pytest.raises(SystemExit) as e:
        main(["inspect", str(model), "--jsn"])
    _, err = capsys.readouterr()
    assert e.value.code == 2
    assert err.startswith("usage: tensorloupe inspect ")
    assert "tensorloupe inspect: error: unrecognized arguments: --jsn" in err
    with pytest.raises(SystemExit):
        main(["values", str(model), "x", "--cuont", "3"])
    assert "tensorloupe values: error: unrecognized arguments: --cuont 3" in capsys.readouterr().err


@pytest.mark.skipif(sys.platform == "emscripten", reason="no subprocess in Pyodide")
def test_an_unknown_option_from_the_shell(model):
    import subprocess
    done = subprocess.run([sys.executable, "-m", "tensorloupe.cli", "inspect", "x", "--jsn"],
                          capture_output=True, text=True, cwd=model.parent,
                          env={"PYTHONPATH": str(ROOT / "pylib"), "PATH": "/usr/bin:/bin"})
    assert done.returncode == 2 and done.stderr.startswith("usage: tensorloupe inspect")


def test_tokens_without_a_tokenizer_says_so_with_the_documented_code(capsys, model):
    code, out, err = run(capsys, "tokens", model)
    assert out == ""
    assert "model.safetensors: no tokenizer: there is no tokenizer.json or tokenizer_config.json " \
           "beside it" in err
    readme = " ".join((ROOT / "README.md").read_text().split())
    assert "`2` bad arguments (including an unknown tensor name, or `tokens` of a checkpoint " \
           "that has no tokenizer)" in readme
    assert "or `tokens` of a checkpoint that has no tokenizer" in " ".join(cli.__doc__.split())
    assert code == cli.EXIT_USAGE == 2


def test_counted():
    assert counted(1, "tensor") == "1 tensor"
    assert counted(0, "tensor") == "0 tensors"
    assert counted(22_000, "tensor") == "22,000 tensors"
    assert counted(1, "matrix", "matrices") == "1 matrix"
    assert counted(3, "matrix", "matrices") == "3 matrices"


def test_messages_use_the_singular_and_group_numbers(capsys, tmp_path):
    one = tmp_path / "one.safetensors"
    save_file({"w": np.ones((2, 2), np.float32)}, str(one))
    code, out, _ = run(capsys, "health", one)
    assert code == 0 and "1 tensor," in out and "1 tensors" not in out
    code, out, _ = run(capsys, "diff", one, one)
    assert code == 0 and "(safetensors, 1 tensor)" in out and "1 tensors" not in out
    many = tmp_path / "many.safetensors"
    save_file({f"t{i}": np.zeros(1, np.float32) for i in range(1234)}, str(many))
    code, out, _ = run(capsys, "inspect", many)
    assert "tensors     1,234" in out
    code, _, err = run(capsys, "values", many, "t1", "--start", "5")
    assert code == 2 and "of 1 element" in err and "1 elements" not in err


def test_no_message_template_writes_a_count_before_a_fixed_plural():
    # f"{n} tensors" in a message says "1 tensors"; counted() is the one way to write a count
    package = ROOT / "pylib" / "tensorloupe"
    nouns = "tensors|files|parts|experts|layers|tokens"
    pattern = re.compile(r"\{len\([^)]*\)\} (" + nouns + r")\b")
    found = [f"{p.relative_to(package)}:{i}" for p in package.rglob("*.py")
             for i, line in enumerate(p.read_text().splitlines(), 1) if pattern.search(line)]
    assert found == []
