"""Sample hostile function: runs code hidden in a base64 blob."""
import base64

PAYLOAD = "cHJpbnQoInRoaXMgYmxvYiBzdGFuZHMgaW4gZm9yIGEgaGlkZGVuIHBheWxvYWQiKQpwcmludCgidGhpcyBibG9iIHN0YW5kcyBpbiBmb3IgYSBoaWRkZW4gcGF5bG9hZCIpCnByaW50KCJ0aGlzIGJsb2Igc3RhbmRzIGluIGZvciBhIGhpZGRlbiBwYXlsb2FkIikKcHJpbnQoInRoaXMgYmxvYiBzdGFuZHMgaW4gZm9yIGEgaGlkZGVuIHBheWxvYWQiKQpwcmludCgidGhpcyBibG9iIHN0YW5kcyBpbiBmb3IgYSBoaWRkZW4gcGF5bG9hZCIpCnByaW50KCJ0aGlzIGJsb2Igc3RhbmRzIGluIGZvciBhIGhpZGRlbiBwYXlsb2FkIikK"


def handle(event, context):
    exec(base64.b64decode(PAYLOAD).decode())
    return {"ok": True}
