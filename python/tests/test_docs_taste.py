"""The Python tastes in docs/python.md and README.md run and fit the line they were made from
(y = x [1, -2, 0.5] + 0.25)."""

import pathlib
import re

import numpy as np
import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
DOC = ROOT / "docs" / "python.md"


@pytest.mark.parametrize("page, heading", [(DOC, "## A taste"), (ROOT / "README.md", "## From Python")])
def test_the_taste_in_the_docs_runs_and_fits(page, heading):
    code = re.search(heading + r"\n.*?```python\n(.*?)```", page.read_text(), re.S).group(1)
    namespace = {"print": lambda *args: None}
    exec(compile(code, str(page), "exec"), namespace)
    np.testing.assert_allclose(namespace["model"].weight.numpy(), [[1.0, -2.0, 0.5]], atol=1e-3)
    np.testing.assert_allclose(namespace["model"].bias.numpy(), [0.25], atol=1e-3)
