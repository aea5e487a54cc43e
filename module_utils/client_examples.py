"""How a client reaches the service: the endpoint, the served model name, and a curl and an OpenAI SDK command that
trust the door's CA and read the API key from its file, so the key is never on a command line or in a process list
(bash: `printf` is a builtin, `cat` sees only the path). Pure: no Ansible imports."""

import json
import os
import shlex

PROMPT = "Say hello in one word."
# Where each system keeps the certificates it trusts, and the command that rebuilds its bundle.
TRUST_STORES = (
    (
        "Debian/Ubuntu",
        "sudo cp {ca} /usr/local/share/ca-certificates/spark-serve-ca.crt && sudo update-ca-certificates",
    ),
    ("Fedora/RHEL", "sudo cp {ca} /etc/pki/ca-trust/source/anchors/spark-serve-ca.pem && sudo update-ca-trust"),
    ("macOS", "sudo security add-trusted-cert -d -r trustRoot -k /Library/Keychains/System.keychain {ca}"),
)


def curl_command(base_url, model, ca_file="", api_key_file="", max_tokens=16):
    """One chat completion with curl: --cacert for the door's CA, the key sent as a header read from a file."""
    body = {"model": model, "messages": [{"role": "user", "content": PROMPT}], "max_tokens": max_tokens}
    words = ["curl", "-sS", "--fail-with-body"]
    words += ["--cacert", shlex.quote(ca_file)] if ca_file else []
    if api_key_file:
        words += ["-H", f"@<(printf 'Authorization: Bearer %s\\n' \"$(cat {shlex.quote(api_key_file)})\")"]
    words += ["-H", "'Content-Type: application/json'", "-d", shlex.quote(json.dumps(body))]
    return " ".join(words + [shlex.quote(f"{base_url}/chat/completions")])


def sdk_command(base_url, model, ca_file="", api_key_file="", max_tokens=16):
    """The same request with the OpenAI Python SDK: SSL_CERT_FILE for the CA, OPENAI_API_KEY from the key file."""
    messages = json.dumps([{"role": "user", "content": PROMPT}])  # JSON of strings is a Python literal too
    code = (
        f"from openai import OpenAI; print(OpenAI(base_url={json.dumps(base_url)}).chat.completions.create("
        f"model={json.dumps(model)}, messages={messages}, max_tokens={int(max_tokens)}).choices[0].message.content)"
    )
    env = [f"SSL_CERT_FILE={shlex.quote(ca_file)}"] if ca_file else []
    # The SDK refuses to start without a key; vLLM without --api-key ignores it.
    env.append(f'OPENAI_API_KEY="$(cat {shlex.quote(api_key_file)})"' if api_key_file else "OPENAI_API_KEY=none")
    return " ".join(env + ["python3", "-c", shlex.quote(code)])


def client_lines(url, model, ca_file="", api_key_file=""):
    """What the deploy prints last: where the service is, which model name to ask for, and how to ask."""
    base_url = url.rstrip("/") + "/v1"
    ca_file, api_key_file = (os.path.normpath(path) if path else "" for path in (ca_file, api_key_file))
    where = [f"endpoint {base_url}, served model name {model}"]
    where += [f"API key: the file {api_key_file} (send it as 'Authorization: Bearer <key>')"] if api_key_file else []
    where += [f"TLS: signed by the CA {ca_file}; give clients that file"] if ca_file else []
    lines = where + [
        "curl (bash): " + curl_command(base_url, model, ca_file, api_key_file),
        "OpenAI SDK (pip install openai): " + sdk_command(base_url, model, ca_file, api_key_file),
    ]
    if ca_file:
        lines += [
            f"trust the CA on a machine ({system}): {command.format(ca=shlex.quote(ca_file))}"
            for system, command in TRUST_STORES
        ]
    return lines
