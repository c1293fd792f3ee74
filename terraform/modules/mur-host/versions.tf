# Provider-free on purpose: this module only renders text, so `terraform init -backend=false`,
# `validate` and `terraform test` work offline. The per-cloud wrappers in ../../examples add providers.
terraform {
  required_version = ">= 1.6"
}
