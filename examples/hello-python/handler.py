"""sless example: greets whoever the JSON event names.

    sless deploy examples/hello-python --name hello --runtime python3.11
    sless invoke hello --data '{"name": "you"}'
"""


def handle(event, context):
    name = event.get("name", "world") if isinstance(event, dict) else "world"
    print(f"greeting {name} (request {context.request_id})")
    return {"message": f"Hello, {name}!"}
