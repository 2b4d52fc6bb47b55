"""hal-python/README.md, the Python walk-through, stays true: it shows the example
word for word and the install command, and the example runs."""

import subprocess
import sys

from conftest import REPO

EXAMPLE = REPO / "hal-python" / "examples" / "share_numpy.py"


def readme():
    return (REPO / "hal-python" / "README.md").read_text()


def test_the_readme_shows_the_example_word_for_word():
    assert f"```python\n{EXAMPLE.read_text()}```" in readme(), (
        "hal-python/README.md does not show hal-python/examples/share_numpy.py as it is"
    )


def test_the_readme_shows_the_install_command():
    assert "```sh\npip install './hal-python[numpy]'\n```" in readme()


def test_the_example_runs_across_two_processes():
    done = subprocess.run(
        [sys.executable, str(EXAMPLE)], capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
    assert "[[-1." in done.stdout
