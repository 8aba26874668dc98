# Deploys the two example functions with the sless Terraform provider: the
# Python one behind an http trigger and run once as a job, the Node one on a
# cron schedule, in the namespace tf-example. Copy this file to a scratch
# directory with the two zips beside it (README.md here has the steps):
#
#   tfwork=$(mktemp -d) && cp examples/terraform/main.tf "$tfwork/"
#   (cd examples/hello-python && python3 -m zipfile -c "$tfwork/hello-python.zip" *)
#   (cd examples/hello-node && python3 -m zipfile -c "$tfwork/hello-node.zip" *)
#   export SLESS_ENDPOINT=http://127.0.0.1:8080 SLESS_TOKEN="$(cat sless-data/admin-token)"
#   terraform -chdir="$tfwork" apply

terraform {
  required_providers {
    sless = {
      source = "sless/sless"
    }
  }
}

# endpoint and token come from SLESS_ENDPOINT and SLESS_TOKEN.
provider "sless" {
  namespace = var.namespace
}

variable "namespace" {
  description = "Its own namespace, so it meets nothing the README's other examples made."
  type        = string
  default     = "tf-example"
}

variable "python_zip" {
  description = "Zip of examples/hello-python, relative to the working directory."
  type        = string
  default     = "hello-python.zip"
}

variable "node_zip" {
  description = "Zip of examples/hello-node, relative to the working directory."
  type        = string
  default     = "hello-node.zip"
}

resource "sless_function" "hello" {
  name     = "hello"
  runtime  = "python3.11"
  filename = var.python_zip
  # A new zip is uploaded and built in place when its hash changes.
  code_hash = filesha256(var.python_zip)
}

resource "sless_function" "hello_node" {
  name        = "hello-node"
  runtime     = "nodejs20"
  filename    = var.node_zip
  code_hash   = filesha256(var.node_zip)
  timeout_sec = 10
}

resource "sless_trigger" "hello_http" {
  name     = "hello-http"
  function = sless_function.hello.name
  type     = "http"
  # enabled = false turns calls away without deleting anything.
}

resource "sless_trigger" "hello_node_nightly" {
  name     = "hello-node-nightly"
  function = sless_function.hello_node.name
  type     = "cron"
  schedule = "0 3 * * *"
  timezone = "Europe/Paris"
  event    = jsonencode({ name = "cron" })
}

resource "sless_job" "greet" {
  name     = "greet"
  function = sless_function.hello.name
  event    = jsonencode({ name = "Terraform" })
  # Raise run_id to run the job again.
  run_id = 1
}

output "hello_url" {
  value = sless_trigger.hello_http.url
}

output "greet_result" {
  value = jsondecode(sless_job.greet.result)
}
