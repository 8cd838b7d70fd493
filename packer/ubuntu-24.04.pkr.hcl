# hpcbake image for Ubuntu 24.04 LTS (Gen2), published to an Azure Compute Gallery.
# See packer/README.md. Every value that differs between teams is a variable.

variable "subscription_id" {
  type        = string
  description = "Subscription the build VM (and the managed image) live in."
}
variable "tenant_id" {
  type    = string
  default = ""
}
variable "client_id" {
  type        = string
  default     = ""
  description = "Service principal; leave empty to use the Azure CLI's login (use_azure_cli_auth)."
}
variable "client_secret" {
  type      = string
  default   = ""
  sensitive = true
}
variable "use_azure_cli_auth" {
  type    = bool
  default = true
}
variable "location" {
  type    = string
  default = "eastus"
}
variable "build_resource_group" {
  type        = string
  description = "Resource group that receives the managed image (it must exist)."
}
variable "vm_size" {
  type        = string
  default     = "Standard_ND96isr_H100_v5"
  description = "The size to build on: hpcbake installs what this size needs and verifies it on real hardware."
}
variable "gallery_subscription_id" {
  type    = string
  default = ""
}
variable "gallery_resource_group" {
  type = string
}
variable "gallery_name" {
  type = string
}
variable "gallery_image_name" {
  type        = string
  description = "Image definition in the gallery (create it first: Linux, generalized, Gen2)."
}
variable "gallery_image_version" {
  type        = string
  description = "Major.Minor.Patch, e.g. 1.0.0."
}
variable "replication_regions" {
  type    = list(string)
  default = []
}
variable "payload_dir" {
  type        = string
  default     = "payload"
  description = "Local directory uploaded to the VM: hpcbake_*.deb, and optionally bundle.tar (hpcbake bundle create)."
}
variable "junit_out" {
  type    = string
  default = "hpcbake-verify-ubuntu-24.04.xml"
}
variable "seal_args" {
  type        = string
  default     = "--deprovision"
  description = "Extra: add --remove-signing-key when modules were signed with hpcbake's generated key."
}

variable "remote_dir" {
  type        = string
  default     = "/tmp/hpcbake-payload"
  description = "Where the payload, the step script and the verify report go on the build VM."
}
variable "reboot_wait" {
  type        = string
  default     = "30s"
  description = "How long Packer waits after hpcbake rebooted the VM before it reconnects."
}
variable "hpcbake_env" {
  type        = list(string)
  default     = []
  description = "Extra NAME=VALUE settings for every step: HPCBAKE_ARGS, HPCBAKE_INSTALL_ARGS, HPCBAKE_VERIFY_ARGS (see scripts/hpcbake-step.sh), proxies."
}

locals {
  # Every hpcbake step runs scripts/hpcbake-step.sh with these settings (the script says what
  # each one means).
  step = "${var.remote_dir}/hpcbake-step.sh"
  env = concat([
    "HPCBAKE_PAYLOAD=${var.remote_dir}",
    "HPCBAKE_SIZE=${var.vm_size}",
    "HPCBAKE_JUNIT=${var.remote_dir}/hpcbake-verify.xml",
    "HPCBAKE_SEAL_ARGS=${var.seal_args}",
  ], var.hpcbake_env)
}

source "azure-arm" "hpcbake" {
  subscription_id    = var.subscription_id
  tenant_id          = var.tenant_id
  client_id          = var.client_id
  client_secret      = var.client_secret
  use_azure_cli_auth = var.use_azure_cli_auth

  os_type         = "Linux"
  image_publisher = "Canonical"
  image_offer     = "ubuntu-24_04-lts"
  image_sku       = "server"
  location        = var.location
  vm_size         = var.vm_size
  os_disk_size_gb = 64

  managed_image_name                = "${var.gallery_image_name}-${var.gallery_image_version}"
  managed_image_resource_group_name = var.build_resource_group

  shared_image_gallery_destination {
    subscription        = var.gallery_subscription_id != "" ? var.gallery_subscription_id : var.subscription_id
    resource_group      = var.gallery_resource_group
    gallery_name        = var.gallery_name
    image_name          = var.gallery_image_name
    image_version       = var.gallery_image_version
    replication_regions = length(var.replication_regions) > 0 ? var.replication_regions : [var.location]
  }

  azure_tags = {
    built_by = "hpcbake"
    vm_size  = var.vm_size
  }
}

# The build block is the same in every template (tests/cli/test_cli_packaging.py checks that),
# and tests/packer/test_packer_null.py runs it with the null builder against a fixture machine.
build {
  sources = ["source.azure-arm.hpcbake"]

  # hpcbake (its package, and an optional offline bundle of the drivers) and the step script.
  provisioner "shell" {
    inline = ["mkdir -p ${var.remote_dir}"]
  }
  provisioner "file" {
    source      = "${var.payload_dir}/"
    destination = var.remote_dir
  }
  provisioner "file" {
    source      = "${path.root}/scripts/hpcbake-step.sh"
    destination = local.step
  }
  provisioner "shell" {
    environment_vars = local.env
    inline           = ["sh ${local.step} package"]
  }

  # First install: hpcbake reboots the VM itself when a step needs it (nouveau, a new
  # kernel); the SSH session drops, which Packer must accept. Exit 7 means the reboot was
  # asked for and the session outlived it.
  provisioner "shell" {
    environment_vars  = local.env
    inline            = ["sh ${local.step} install --reboot=auto"]
    expect_disconnect = true
    valid_exit_codes  = [0, 7]
  }
  # After the reboot: resume (done steps are skipped). A second reboot is still allowed.
  provisioner "shell" {
    pause_before      = var.reboot_wait
    environment_vars  = local.env
    inline            = ["sh ${local.step} install --reboot=auto"]
    expect_disconnect = true
  }
  # Must now be complete with no reboot left (exit 7 here fails the build).
  provisioner "shell" {
    pause_before     = var.reboot_wait
    environment_vars = local.env
    inline           = ["sh ${local.step} install --reboot=never"]
  }

  # verify --junit; exit 6 (a failed check) fails the build, after the report is written.
  provisioner "shell" {
    environment_vars = local.env
    inline           = ["sh ${local.step} verify"]
  }
  provisioner "file" {
    direction   = "download"
    source      = "${var.remote_dir}/hpcbake-verify.xml"
    destination = var.junit_out
  }

  # Last: seal refuses unless everything above held; writes /var/lib/hpcbake/image-manifest.json,
  # then waagent -force -deprovision+user. The provisioning user is gone afterwards, so the
  # script is not cleaned up.
  provisioner "shell" {
    environment_vars = local.env
    inline           = ["sh ${local.step} seal"]
    skip_clean       = true
  }
}
