# hpcbake: an Azure Compute Gallery image version for one VM size and one distro (hpcbake install,
# its reboot, verify, seal), baked on that size's own hardware or on a general-purpose size with
# the hardware verdict deferred to the first boot on the target (build_vm_size).
# packer/README.md is the guide: the steps, the variables, and how the build is tested.

packer {
  # required_plugins needs Packer 1.7.0 or later (packer init installs the plugin).
  required_version = ">= 1.7.0"
  required_plugins {
    azure = {
      source = "github.com/hashicorp/azure"
      # 2.0.5 added security_type; secure_boot_enabled and vtpm_enabled came in 1.4.1, and
      # publishing to a gallery without an intermediate managed image in 1.4.0.
      version = ">= 2.0.5"
    }
  }
}

# ---- what to build ------------------------------------------------------------------------------

variable "distro" {
  type        = string
  default     = "ubuntu-22.04"
  description = "hpcbake's distro id (manifests/distros): picks the marketplace base image (local.marketplace) unless image_sku is set."
  validation {
    condition = contains(["ubuntu-22.04", "ubuntu-24.04", "almalinux-8.10", "almalinux-9", "rocky-8.10", "rocky-9",
    "rhel-8.10", "rhel-9", "azurelinux-3.0", "debian-12"], var.distro)
    error_message = "The distro must be one of hpcbake's: ubuntu-22.04, ubuntu-24.04, almalinux-8.10, almalinux-9, rocky-8.10, rocky-9, rhel-8.10, rhel-9, azurelinux-3.0, debian-12."
  }
}
variable "image_publisher" {
  type        = string
  default     = ""
  description = "With image_offer and image_sku: a base image of your choice instead of the distro's (an Arm64 image, or rhel-9 and debian-12, for which hpcbake names none)."
}
variable "image_offer" {
  type    = string
  default = ""
}
variable "image_sku" {
  type    = string
  default = ""
}
# The size the image is for (size) and the size of the VM the bake runs on (build_vm_size). With
# the two equal the build VM's own GPUs and HCAs are verified before anything is captured. With
# them different the bake needs none of the target's hardware: install plans and installs
# everything the target needs, verify runs the checks that need no GPU or HCA and defers the rest
# (--hardware-checks deferred), seal records the deferred verdict (--verify deferred), and the
# image version is published excluded from "latest" until a VM of the target size has booted from
# it and passed its first-boot verify (packer/prove-image.sh; packer/README.md, "Bake on any size,
# prove on the target").
variable "size" {
  type        = string
  default     = "Standard_ND96isr_H100_v5"
  description = "The size the image is for: hpcbake install --size and verify --size. Its hardware is verified on the build VM when build_vm_size is this size, else at the first boot on it."
  validation {
    condition     = length(regex_replace(var.size, "^Standard_[A-Za-z0-9][A-Za-z0-9_-]*$", "")) == 0
    error_message = "The size must be an Azure VM size name, such as Standard_ND96isr_H100_v5 (az vm list-sizes --location LOCATION)."
  }
}
variable "build_vm_size" {
  type        = string
  default     = ""
  description = "The size of the VM the bake runs on (the azure-arm source's vm_size). Empty: Standard_D8s_v5, or Standard_D8ps_v6 when the release is linux-aarch64: general-purpose D-family sizes of the same architecture that support Hyper-V generation 2 and Trusted Launch (MicrosoftDocs/azure-compute-docs articles/virtual-machines/sizes/general-purpose/dsv5-series.md and dpsv6-series.md, 'Feature support'; articles/virtual-machines/trusted-launch.md, 'Virtual machines sizes'). Set it to size to bake and verify on the target's own hardware."
  validation {
    condition     = length(regex_replace(var.build_vm_size, "^(Standard_[A-Za-z0-9][A-Za-z0-9_-]*)?$", "")) == 0
    error_message = "The build_vm_size must be an Azure VM size name, such as Standard_D8s_v5 (az vm list-sizes --location LOCATION), or empty for the default."
  }
}
variable "vm_size" {
  type        = string
  default     = ""
  description = "Replaced by size and build_vm_size; refused when set."
  validation {
    condition     = var.vm_size == ""
    error_message = "The vm_size variable is gone: set size (the size the image is for) and, to bake on that size itself as vm_size did, build_vm_size to the same value."
  }
}
variable "profile" {
  type        = string
  default     = "default"
  description = "hpcbake's image profile (manifests/profiles): default (driver, Fabric Manager or IMEX, InfiniBand, DCGM where pinned), minimal, containers (NVIDIA Container Toolkit, Docker and containerd with the nvidia runtime, CDI), ai (containers plus the CUDA toolkit)"
}

# ---- Azure --------------------------------------------------------------------------------------

variable "subscription_id" {
  type        = string
  description = "Subscription the build VM runs in."
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
  type        = string
  default     = "eastus"
  description = "Where the build VM runs (in a resource group Packer creates and deletes); build_vm_size must be available there."
}

# Trusted Launch and the routes by which modules load under Secure Boot (docs/secure-boot.md,
# packer/README.md "Trusted Launch"). The image definition's security type must fit:
#   Standard                a standard Gen2 build VM; image definition without a security type.
#   TrustedLaunch           the build VM boots with Secure Boot and a vTPM as configured below;
#                           image definition --features SecurityType=TrustedLaunch.
#   TrustedLaunchSupported  the image's UEFI db route: a standard Gen2 build VM (Secure Boot off,
#                           so the modules hpcbake signs load while verify runs), hpcbake signs
#                           every module it builds, and before seal writes the request body of the
#                           image version whose UEFI db holds its certificate (hpcbake seal
#                           --uefi-db-json), downloaded to uefi_db_json; image definitions
#                           --features SecurityType=TrustedLaunchSupported.
variable "security_type" {
  type        = string
  default     = "Standard"
  description = "Standard, TrustedLaunch, or TrustedLaunchSupported (the image's UEFI db route): see the comment above and packer/README.md."
  validation {
    condition     = contains(["Standard", "TrustedLaunch", "TrustedLaunchSupported"], var.security_type)
    error_message = "The security_type must be Standard, TrustedLaunch or TrustedLaunchSupported."
  }
}
variable "secure_boot_enabled" {
  type        = bool
  default     = true
  description = "Secure Boot on the build VM when security_type is TrustedLaunch (ignored otherwise). hpcbake then signs the modules it builds: see seal_args."
}
variable "vtpm_enabled" {
  type        = bool
  default     = true
  description = "A virtual TPM on the build VM when security_type is TrustedLaunch (ignored otherwise)."
}

# The gallery and the image definition: create them first (packer/README.md, step 3).
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
  description = "The image definition in the gallery: Linux, Generalized, Hyper-V generation V2, and the security type of security_type."
}
variable "gallery_image_version" {
  type        = string
  description = "Major.Minor.Patch, e.g. 1.0.0."
  validation {
    condition     = length(regex_replace(var.gallery_image_version, "^[0-9]+\\.[0-9]+\\.[0-9]+$", "")) == 0
    error_message = "The gallery_image_version must be Major.Minor.Patch, such as 1.0.0."
  }
}
variable "replication_regions" {
  type    = list(string)
  default = []
}

# ---- hpcbake ------------------------------------------------------------------------------------

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
variable "remote_dir" {
  type        = string
  default     = "/var/lib/hpcbake-payload"
  description = "Where the payload, the step script and the verify report go on the build VM. It must survive hpcbake's reboot, so never under /tmp (emptied at boot), /run or /dev/shm (memory); the seal step deletes it before the deprovision."
  validation {
    condition     = length(regex_replace(var.remote_dir, "^/[^/]+/.*[^/]$", "")) == 0 && length(regex_replace(var.remote_dir, "^/(tmp|run|dev/shm)(/.*)?$", "")) > 0
    error_message = "The remote_dir must be an absolute directory below a top-level one and not under /tmp, /run or /dev/shm: the steps after hpcbake's reboot need it, and those are emptied at boot."
  }
}
variable "junit_out" {
  type        = string
  default     = ""
  description = "Where the verify report is downloaded on the machine running Packer (default hpcbake-verify-DISTRO.xml)."
}
variable "seal_args" {
  type        = string
  default     = "--deprovision"
  description = "seal's options: add --remove-signing-key when the modules were signed with hpcbake's generated key (Secure Boot); security_type TrustedLaunchSupported adds it itself."
}
variable "uefi_db_json" {
  type        = string
  default     = ""
  description = "With security_type TrustedLaunchSupported: where the request body of the image version with hpcbake's certificate in its UEFI db is downloaded on the machine running Packer (default hpcbake-uefi-db-DISTRO.json)."
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
  # Each distro's marketplace base image (x86_64, Hyper-V generation 2), as Azure/azhpc-images
  # builds its HPC images from them (packer/variables.pkr.hcl, builtin_marketplace_base_image_details;
  # RHEL 8.10: partners/rhel/imagebuilder/RHEL-hpc-sig-template.json). rhel-9 and debian-12 have
  # none here: give image_publisher, image_offer and image_sku.
  marketplace = {
    "ubuntu-22.04"   = { publisher = "Canonical", offer = "0001-com-ubuntu-server-jammy", sku = "22_04-lts-gen2" }
    "ubuntu-24.04"   = { publisher = "Canonical", offer = "ubuntu-24_04-lts", sku = "server" }
    "almalinux-8.10" = { publisher = "almalinux", offer = "almalinux-x86_64", sku = "8-gen2" }
    "almalinux-9"    = { publisher = "almalinux", offer = "almalinux-x86_64", sku = "9-gen2" }
    "rocky-8.10"     = { publisher = "resf", offer = "rockylinux-x86_64", sku = "8-base" }
    "rocky-9"        = { publisher = "resf", offer = "rockylinux-x86_64", sku = "9-base" }
    "rhel-8.10"      = { publisher = "RedHat", offer = "RHEL", sku = "8-lvm-gen2" }
    "azurelinux-3.0" = { publisher = "MicrosoftCBLMariner", offer = "azure-linux-3", sku = "azure-linux-3-gen2" }
  }
  # Marketplace images sold under a purchase plan (the same source: builtin_marketplace_plan_info).
  plans = {
    "rocky-8.10" = { name = "8-base", product = "rockylinux-x86_64", publisher = "resf" }
    "rocky-9"    = { name = "9-base", product = "rockylinux-x86_64", publisher = "resf" }
  }
  image = var.image_sku != "" ? { publisher = var.image_publisher, offer = var.image_offer, sku = var.image_sku } : lookup(local.marketplace, var.distro, { publisher = "", offer = "", sku = "" })
  plan  = var.image_sku != "" ? { name = "", product = "", publisher = "" } : lookup(local.plans, var.distro, { name = "", product = "", publisher = "" })

  # The build VM's size: build_vm_size, or a general-purpose size of the release's architecture
  # (the tarball's name ends in linux-x86_64 or linux-aarch64) with Gen2 and Trusted Launch:
  # MicrosoftDocs/azure-compute-docs articles/virtual-machines/sizes/general-purpose/dsv5-series.md
  # @005f8f6e0693849201f057b38475bfaecb85b3e8 and dpsv6-series.md @2072bfd7009384b9fde1357342d91953104e293d
  # ("Feature support"), articles/virtual-machines/trusted-launch.md @02ecf3f44efe41e8a9768513210a419624b11c94
  # ("Virtual machines sizes": D-family and Dpsv6 supported, Dpsv5 not yet). When it is not the target size, the
  # target's hardware checks are deferred to its first boot (HPCBAKE_HARDWARE_CHECKS) and the
  # version is published excluded from latest until packer/prove-image.sh has proven it.
  aarch64       = replace(var.hpcbake_release_url, "linux-aarch64.tar.gz", "") != var.hpcbake_release_url
  build_vm_size = var.build_vm_size != "" ? var.build_vm_size : (local.aarch64 ? "Standard_D8ps_v6" : "Standard_D8s_v5")
  deferred      = lower(local.build_vm_size) != lower(var.size)

  trusted_launch = var.security_type == "TrustedLaunch"
  uefi_db        = var.security_type == "TrustedLaunchSupported"
  junit_out      = var.junit_out != "" ? var.junit_out : "hpcbake-verify-${var.distro}.xml"
  uefi_db_json   = var.uefi_db_json != "" ? var.uefi_db_json : "hpcbake-uefi-db-${var.distro}.json"

  gallery_subscription = var.gallery_subscription_id != "" ? var.gallery_subscription_id : var.subscription_id
  replication_regions  = length(var.replication_regions) > 0 ? var.replication_regions : [var.location]
  # The UEFI db route: the image version this build publishes is the source of the one whose db
  # holds hpcbake's certificate (packer/README.md, "The image's UEFI db").
  published_version = "/subscriptions/${local.gallery_subscription}/resourceGroups/${var.gallery_resource_group}/providers/Microsoft.Compute/galleries/${var.gallery_name}/images/${var.gallery_image_name}/versions/${var.gallery_image_version}"
  # seal --check judges as the seal that follows, which removes the generated key (seal_args).
  uefi_db_args = local.uefi_db ? join(" ", concat(["--remove-signing-key", "--source-id", local.published_version, "--location", var.location],
  flatten([for r in local.replication_regions : ["--target-region", r]]))) : ""
  # The db route's generated signing key must not be captured: seal removes it (its certificate stays).
  seal_args = local.uefi_db ? "${var.seal_args} --remove-signing-key" : var.seal_args

  # Every hpcbake step runs scripts/hpcbake-step.sh with these settings (the script says what
  # each one means).
  step = "${var.remote_dir}/hpcbake-step.sh"
  env = concat([
    "HPCBAKE_PAYLOAD=${var.remote_dir}",
    "HPCBAKE_DIR=${var.hpcbake_dir}",
    "HPCBAKE_LINK=${var.hpcbake_link}",
    "HPCBAKE_SIZE=${var.size}",
    # deferred: the build VM is not the target size; empty: verify the hardware here, as always.
    "HPCBAKE_HARDWARE_CHECKS=${local.deferred ? "deferred" : ""}",
    "HPCBAKE_PROFILE=${var.profile}",
    "HPCBAKE_JUNIT=${var.remote_dir}/hpcbake-verify.xml",
    "HPCBAKE_SEAL_ARGS=${local.seal_args}",
    # Standard and the db route build on a VM without Secure Boot: the package step stops when
    # Trusted Launch by default turned it on anyway (the plugin cannot ask for securityType
    # Standard). The db route signs every module hpcbake builds, Secure Boot or not.
    "HPCBAKE_SECURE_BOOT=${local.trusted_launch ? "" : "off"}",
    "HPCBAKE_SIGN=${local.uefi_db ? "on" : ""}",
    "HPCBAKE_UEFI_DB_ARGS=${local.uefi_db_args}",
  ], var.hpcbake_env)
  # Tags on every resource the build creates, the image version included
  # (hashicorp/packer-plugin-azure@999eec9ebe35e3be4ad3b50be79a29fd026b5ad4
  # builder/azure/arm/step_publish_to_shared_image_gallery.go: the version's Tags are azure_tags).
  tags = {
    built_by = "hpcbake"
    distro   = var.distro
    # The size the image is for (packer/prove-image.sh reads it from the image version), the
    # size it was baked on, and whether its hardware verdict waits for the first boot.
    size          = var.size
    build_vm_size = local.build_vm_size
    hardware      = local.deferred ? "deferred" : "verified"
  }
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
  image_publisher = local.image.publisher
  image_offer     = local.image.offer
  image_sku       = local.image.sku
  dynamic "plan_info" {
    for_each = local.plan.name == "" ? [] : [local.plan]
    content {
      plan_name      = plan_info.value.name
      plan_product   = plan_info.value.product
      plan_publisher = plan_info.value.publisher
    }
  }
  location        = var.location
  vm_size         = local.build_vm_size
  os_disk_size_gb = 64

  # Trusted Launch. Standard (and the db route's build VM) cannot be written here: the plugin
  # refuses any security_type but TrustedLaunch or ConfidentialVM (hashicorp/packer-plugin-azure
  # @999eec9ebe35e3be4ad3b50be79a29fd026b5ad4 builder/azure/arm/config.go,
  # assertAllowedSecurityType) and then sends the VM no securityProfile at all
  # (builder/azure/common/template/template_builder.go, SetSecurityProfile). So null here, and
  # the package step refuses a VM that booted with Secure Boot on all the same (HPCBAKE_SECURE_BOOT).
  security_type       = local.trusted_launch ? "TrustedLaunch" : null
  secure_boot_enabled = local.trusted_launch && var.secure_boot_enabled
  vtpm_enabled        = local.trusted_launch && var.vtpm_enabled

  # Published straight to the gallery: no intermediate managed image (the plugin refuses Secure
  # Boot and vTPM with one).
  shared_image_gallery_destination {
    subscription        = local.gallery_subscription
    resource_group      = var.gallery_resource_group
    gallery_name        = var.gallery_name
    image_name          = var.gallery_image_name
    image_version       = var.gallery_image_version
    replication_regions = local.replication_regions
  }
  # A version baked on another size is not used as "latest" until a VM of the target size has
  # passed its first-boot verify: packer/prove-image.sh then sets publishingProfile.excludeFromLatest
  # to false (hashicorp/packer-plugin-azure@999eec9ebe35e3be4ad3b50be79a29fd026b5ad4
  # docs-partials/builder/azure/arm/Config-not-required.mdx, shared_gallery_image_version_exclude_from_latest).
  shared_gallery_image_version_exclude_from_latest = local.deferred

  azure_tags = local.tags
}

# One build block for every distro and every source: tests/packer/test_packer_null.py runs it with
# the null builder against a fixture machine, and tests/packer/test_packer_qemu.py with the qemu
# builder in a Debian 12 VM, with only the source swapped.
build {
  sources = ["source.azure-arm.hpcbake"]

  # The payload directory, owned by the SSH user (root, or the admin user with sudo) so that the
  # file provisioner can write it; then the payload (an optional offline bundle of the drivers)
  # and the step script; then the package step downloads the hpcbake release, checks its SHA-256
  # and unpacks it into hpcbake_dir.
  provisioner "shell" {
    inline = ["if [ \"$(id -u)\" -eq 0 ]; then install -d -m 0700 '${var.remote_dir}'; else sudo install -d -m 0700 -o \"$(id -u)\" -g \"$(id -g)\" '${var.remote_dir}'; fi"]
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
    valid_exit_codes = [0]
  }

  # First install: hpcbake reboots the VM itself when a step needs it (nouveau, a new kernel, a
  # module to boot into); the SSH session drops, which Packer must accept. Exit 7 means the
  # reboot was asked for and the session outlived the command.
  provisioner "shell" {
    environment_vars  = local.env
    inline            = ["sh ${local.step} install --reboot=auto"]
    expect_disconnect = true
    valid_exit_codes  = [0, 7]
  }
  # After the reboot: resume (done steps are skipped). A second reboot is still allowed, the
  # same way.
  provisioner "shell" {
    pause_before      = var.reboot_wait
    environment_vars  = local.env
    inline            = ["sh ${local.step} install --reboot=auto"]
    expect_disconnect = true
    valid_exit_codes  = [0, 7]
  }
  # Must now be complete with no reboot left: exit 7 here fails the build.
  provisioner "shell" {
    pause_before     = var.reboot_wait
    environment_vars = local.env
    inline           = ["sh ${local.step} install --reboot=never"]
    valid_exit_codes = [0]
  }

  # verify --junit; exit 6 (a failed check) fails the build, after the report is written.
  provisioner "shell" {
    environment_vars = local.env
    inline           = ["sh ${local.step} verify"]
    valid_exit_codes = [0]
  }
  provisioner "file" {
    direction   = "download"
    source      = "${var.remote_dir}/hpcbake-verify.xml"
    destination = local.junit_out
  }

  # The UEFI db route (security_type TrustedLaunchSupported): seal --check, and the request body
  # of the image version whose UEFI db holds the module-signing certificate, written to
  # remote_dir/hpcbake-uefi-db.json and downloaded to uefi_db_json before the seal step deletes
  # remote_dir. With the other security types the step does nothing, and this download (a
  # provisioner cannot be made conditional) fetches the verify report to junit_out once more.
  provisioner "shell" {
    environment_vars = local.env
    inline           = ["sh ${local.step} uefi-db"]
    valid_exit_codes = [0]
  }
  provisioner "file" {
    direction   = "download"
    source      = local.uefi_db ? "${var.remote_dir}/hpcbake-uefi-db.json" : "${var.remote_dir}/hpcbake-verify.xml"
    destination = local.uefi_db ? local.uefi_db_json : local.junit_out
  }

  # Last: the step deletes the payload directory (remote_dir: the step script itself, the bundle,
  # the report), then seal refuses unless everything above held, writes
  # /var/lib/hpcbake/image-manifest.json and runs waagent -force -deprovision+user. The
  # provisioning user is gone afterwards, so Packer's copy of this inline script is not cleaned up.
  provisioner "shell" {
    environment_vars = local.env
    inline           = ["sh ${local.step} seal"]
    valid_exit_codes = [0]
    skip_clean       = true
  }
}
