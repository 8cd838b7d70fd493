# hpcbake image for Ubuntu 22.04 LTS (Gen2), published to an Azure Compute Gallery.
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
variable "image_offer" {
  type    = string
  default = "0001-com-ubuntu-server-jammy"
}
variable "image_sku" {
  type        = string
  default     = "22_04-lts-gen2"
  description = "The base image's SKU; an Arm64 size needs the distro's Arm64 image (and the linux-aarch64 release)."
}
variable "profile" {
  type        = string
  default     = "default"
  description = "hpcbake's image profile (manifests/profiles): default (driver, Fabric Manager or IMEX, InfiniBand, DCGM where pinned), minimal, containers (NVIDIA Container Toolkit, Docker and containerd with the nvidia runtime, CDI), ai (containers plus the CUDA toolkit)"
}

variable "hpcbake_release_url" {
  type        = string
  sensitive   = true
  description = "URL of the release tarball hpcbake-VERSION-linux-ARCH.tar.gz the VM downloads (your storage account's copy, a SAS token in its query); ARCH must be the VM's (uname -m)."
  validation {
    condition     = length(regex_replace(var.hpcbake_release_url, "^(https?|file)://.+", "")) == 0
    error_message = "The hpcbake_release_url must be an https:// (or http://, file://) URL of the release tarball hpcbake-VERSION-linux-ARCH.tar.gz."
  }
}
variable "hpcbake_release_sha256" {
  type        = string
  description = "SHA-256 of that tarball: its line of the release's SHA256SUMS, or the 64 hex digits alone. The VM checks the download with sha256sum -c before unpacking it."
  validation {
    condition     = length(var.hpcbake_release_sha256) >= 64 && length(regex_replace(var.hpcbake_release_sha256, "^[0-9a-fA-F]{64}(\\s.*)?$", "")) == 0
    error_message = "The hpcbake_release_sha256 must be the tarball's SHA-256: 64 hex digits, or its whole line of SHA256SUMS."
  }
}
variable "hpcbake_dir" {
  type        = string
  default     = "/opt/hpcbake"
  description = "Where the release is unpacked on the VM (and stays in the image); every step runs its bin/hpcbake."
}
variable "hpcbake_link" {
  type        = string
  default     = "/usr/local/bin/hpcbake"
  description = "A symbolic link to the unpacked bin/hpcbake, so that hpcbake is on PATH in the image; empty for none."
}
variable "payload_dir" {
  type        = string
  default     = "payload"
  description = "Local directory uploaded to the VM; it must exist and may be empty: put bundle.tar there (hpcbake bundle create) for an offline install."
}
variable "junit_out" {
  type    = string
  default = "hpcbake-verify-ubuntu-22.04.xml"
}
variable "seal_args" {
  type        = string
  default     = "--deprovision"
  description = "Extra: add --remove-signing-key when modules were signed with hpcbake's generated key."
}

variable "remote_dir" {
  type        = string
  default     = "/var/tmp/hpcbake-payload"
  description = "Where the payload, the step script and the verify report go on the build VM. Not under /tmp: Ubuntu empties /tmp at boot, and the steps after hpcbake's reboot need them."
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
    "HPCBAKE_DIR=${var.hpcbake_dir}",
    "HPCBAKE_LINK=${var.hpcbake_link}",
    "HPCBAKE_SIZE=${var.vm_size}",
    "HPCBAKE_PROFILE=${var.profile}",
    "HPCBAKE_JUNIT=${var.remote_dir}/hpcbake-verify.xml",
    "HPCBAKE_SEAL_ARGS=${var.seal_args}",
  ], var.hpcbake_env)
  # Only the package step sees the release URL (and its SAS token).
  release = [
    "HPCBAKE_RELEASE_URL=${var.hpcbake_release_url}",
    "HPCBAKE_RELEASE_SHA256=${var.hpcbake_release_sha256}",
  ]
}

source "azure-arm" "hpcbake" {
  subscription_id    = var.subscription_id
  tenant_id          = var.tenant_id
  client_id          = var.client_id
  client_secret      = var.client_secret
  use_azure_cli_auth = var.use_azure_cli_auth

  os_type         = "Linux"
  image_publisher = "Canonical"
  image_offer     = var.image_offer
  image_sku       = var.image_sku
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

  # The step script and an optional offline bundle of the drivers; then the package step
  # downloads the hpcbake release, checks its SHA-256 and unpacks it into hpcbake_dir.
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
    environment_vars = concat(local.env, local.release)
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
