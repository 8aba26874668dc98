"""Sample innocent function: decodes an uploaded document and runs a converter."""
import base64
import subprocess
import tempfile


def handle(event, context):
    data = base64.b64decode(event["document"])
    with tempfile.NamedTemporaryFile(suffix=".txt") as src:
        src.write(data)
        src.flush()
        result = subprocess.run(["wc", "-w", src.name], capture_output=True, text=True, check=True)
    words = int(result.stdout.split()[0])
    return {"words": words, "echo": base64.b64encode(data[:64]).decode()}
