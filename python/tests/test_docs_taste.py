"""The taste in docs/python.md runs and fits the line it was made from (y = x [1, -2, 0.5] + 0.25)."""

import pathlib
import re

import numpy as np

DOC = pathlib.Path(__file__).resolve().parents[2] / "docs" / "python.md"


def test_the_taste_in_the_docs_runs_and_fits():
    code = re.search(r"## A taste\n\n```python\n(.*?)```", DOC.read_text(), re.S).group(1)
    namespace = {"print": lambda *args: None}
    exec(compile(code, str(DOC), "exec"), namespace)
    np.testing.assert_allclose(namespace["model"].weight.numpy(), [[1.0, -2.0, 0.5]], atol=1e-3)
    np.testing.assert_allclose(namespace["model"].bias.numpy(), [0.25], atol=1e-3)
