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
  # hpcbake's sizes (manifests/sizes: `size` of each file), as Azure spells them; compared without
  # case, as Azure compares size names. A typo is refused here instead of on the billed build VM.
  validation {
    condition = contains([for s in [
      "Standard_HB120-16rs_v2", "Standard_HB120-16rs_v3", "Standard_HB120-32rs_v2",
      "Standard_HB120-32rs_v3", "Standard_HB120-64rs_v2", "Standard_HB120-64rs_v3",
      "Standard_HB120-96rs_v2", "Standard_HB120-96rs_v3", "Standard_HB120rs_v2",
      "Standard_HB120rs_v3", "Standard_HB176-144rs_v4", "Standard_HB176-24rs_v4",
      "Standard_HB176-48rs_v4", "Standard_HB176-96rs_v4", "Standard_HB176rs_v4",
      "Standard_HB368-144rs_v5", "Standard_HB368-192rs_v5", "Standard_HB368-240rs_v5",
      "Standard_HB368-288rs_v5", "Standard_HB368-336rs_v5", "Standard_HB368-48rs_v5",
      "Standard_HB368-96rs_v5", "Standard_HB368rs_v5", "Standard_HC44-16rs", "Standard_HC44-32rs",
      "Standard_HC44rs", "Standard_HX176-144rs", "Standard_HX176-24rs", "Standard_HX176-48rs",
      "Standard_HX176-96rs", "Standard_HX176rs", "Standard_NC12s_v3",
      "Standard_NC144ds_xl_RTXPRO6000BSE_v6", "Standard_NC144lds_xl_RTXPRO6000BSE_v6",
      "Standard_NC16as_T4_v3", "Standard_NC24ads_A100_v4", "Standard_NC24lds_xl_RTXPRO6000BSE_v6",
      "Standard_NC24rs_v3", "Standard_NC24s_v3", "Standard_NC288ds_xl_RTXPRO6000BSE_v6",
      "Standard_NC288lds_xl_RTXPRO6000BSE_v6", "Standard_NC36ds_xl_RTXPRO6000BSE_v6",
      "Standard_NC36lds_xl_RTXPRO6000BSE_v6", "Standard_NC40ads_H100_v5", "Standard_NC48ads_A100_v4",
      "Standard_NC4as_T4_v3", "Standard_NC64as_T4_v3", "Standard_NC6s_v3",
      "Standard_NC72ds_xl_RTXPRO6000BSE_v6", "Standard_NC72lds_xl_RTXPRO6000BSE_v6",
      "Standard_NC80adis_H100_v5", "Standard_NC8as_T4_v3", "Standard_NC96ads_A100_v4",
      "Standard_NCC40ads_H100_v5", "Standard_ND128isr_GB300_v6", "Standard_ND128isr_NDR_GB200_v6",
      "Standard_ND40rs_v2", "Standard_ND96amsr_A100_v4", "Standard_ND96asr_MI200_v4",
      "Standard_ND96asr_v4", "Standard_ND96is_H100_v5", "Standard_ND96is_H200_v5",
      "Standard_ND96isr_H100_v5", "Standard_ND96isr_H200_v5", "Standard_ND96isr_MI300X_v5",
      "Standard_ND96isrf_H200_v5", "Standard_NV12", "Standard_NV12ads_A10_v5", "Standard_NV12s_v3",
      "Standard_NV18ads_A10_v5", "Standard_NV24", "Standard_NV24s_v3", "Standard_NV36adms_A10_v5",
      "Standard_NV36ads_A10_v5", "Standard_NV48s_v3", "Standard_NV6", "Standard_NV6ads_A10_v5",
      "Standard_NV72ads_A10_v5",
    ] : lower(s)], lower(var.size))
    error_message = "The size must be one of hpcbake's VM sizes (manifests/sizes; `hpcbake sizes` lists them), such as Standard_ND96isr_H100_v5."
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
  description = "hpcbake's image profile (manifests/profiles): default (driver, Fabric Manager or IMEX, InfiniBand, DCGM where pinned), minimal, containers (NVIDIA Container Toolkit, Docker and containerd with the nvidia runtime, CDI), ai (containers plus the CUDA toolkit), hpc (CPU HPC on InfiniBand: MPI stacks, RDMA limits), kubernetes (containers with containerd running the nvidia runtime by default and CDI on)"
  # Validated like distro: a typo stops packer validate instead of the install on the billed VM.
  validation {
    condition     = contains(["ai", "containers", "default", "hpc", "kubernetes", "minimal"], var.profile)
    error_message = "The profile must be one of hpcbake's: ai, containers, default, hpc, kubernetes, minimal (manifests/profiles)."
  }
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
  description = "Where the build VM runs (in a resource group Packer creates and deletes, unless build_resource_group_name is set); build_vm_size must be available there. Also the default of replication_regions and the UEFI db body's location."
}

# For subscriptions that forbid public IPs, resource-group creation or on-demand quota. Each is the
# azure-arm builder's own option of the same name (hashicorp/packer-plugin-azure
# @999eec9ebe35e3be4ad3b50be79a29fd026b5ad4 docs-partials/builder/azure/arm/Config-not-required.mdx
# and Spot-not-required.mdx); unset by default, and the build is then as before.
variable "virtual_network_name" {
  type        = string
  default     = ""
  description = "An existing virtual network for the build VM: no public IP is used or created, so the machine running Packer must reach the VM's private address. Empty: Packer creates a network with a public IP."
}
variable "virtual_network_subnet_name" {
  type        = string
  default     = ""
  description = "The subnet of virtual_network_name (needed when the network has several)."
  validation {
    condition     = var.virtual_network_subnet_name == "" || length(regex_replace(var.virtual_network_subnet_name, "^[^/]+$", "")) == 0
    error_message = "The virtual_network_subnet_name must be the subnet's name, not its resource ID."
  }
}
variable "virtual_network_resource_group_name" {
  type        = string
  default     = ""
  description = "The resource group of virtual_network_name (needed when Packer cannot find it alone)."
}
variable "build_resource_group_name" {
  type        = string
  default     = ""
  description = "An existing resource group to build in instead of one Packer creates and deletes; the build VM then runs in its region, and location is not passed to the builder (it refuses both)."
}
variable "user_assigned_managed_identities" {
  type        = list(string)
  default     = []
  description = "Resource IDs of user-assigned managed identities for the build VM (to read the release blob without a SAS token, for one); whoever runs Packer needs Managed Identity Operator and Virtual Machine Contributor."
  validation {
    condition     = length([for id in var.user_assigned_managed_identities : id if length(regex_replace(id, "^/subscriptions/[^/]+/resource[Gg]roups/[^/]+/providers/Microsoft\\.ManagedIdentity/userAssignedIdentities/[^/]+$", "")) > 0]) == 0
    error_message = "Each user_assigned_managed_identities entry must be a full resource ID: /subscriptions/SUB/resourceGroups/RG/providers/Microsoft.ManagedIdentity/userAssignedIdentities/NAME."
  }
}
variable "spot" {
  type = object({
    eviction_policy = string
    max_price       = number
  })
  default     = null
  description = "Build on a Spot VM: { eviction_policy = \"Delete\" or \"Deallocate\", max_price = dollars per hour, or -1 for up to the on-demand price }. Only the build VM is Spot; an eviction fails the build. null: on-demand."
  validation {
    condition     = var.spot == null ? true : contains(["Delete", "Deallocate"], var.spot.eviction_policy) && (var.spot.max_price == -1 || var.spot.max_price > 0)
    error_message = "The spot eviction_policy must be Delete or Deallocate, and max_price -1 (up to the on-demand price) or a price above 0."
  }
}
variable "os_disk_size_gb" {
  type        = number
  default     = 64
  description = "The build VM's OS disk, and so the image's, in GB: no smaller than the base image's (Azure refuses a smaller one)."
  # The builder silently ignores zero or less ("Values of zero or less than zero are ignored"):
  # refused here, so that a slip never builds with the base image's disk instead.
  validation {
    condition     = var.os_disk_size_gb >= 1 && floor(var.os_disk_size_gb) == var.os_disk_size_gb
    error_message = "The os_disk_size_gb must be a whole number of GB, 1 or more (the default is 64)."
  }
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
  # An existing resource group (build_resource_group_name) and location exclude each other in the
  # builder ("Specify either a location ... or an existing build_resource_group_name, but not both").
  location                  = var.build_resource_group_name == "" ? var.location : null
  build_resource_group_name = var.build_resource_group_name == "" ? null : var.build_resource_group_name
  vm_size                   = local.build_vm_size
  os_disk_size_gb           = var.os_disk_size_gb

  # An existing network: a private address only, no public IP (empty: the builder's own network).
  virtual_network_name                = var.virtual_network_name == "" ? null : var.virtual_network_name
  virtual_network_subnet_name         = var.virtual_network_subnet_name == "" ? null : var.virtual_network_subnet_name
  virtual_network_resource_group_name = var.virtual_network_resource_group_name == "" ? null : var.virtual_network_resource_group_name
  user_assigned_managed_identities    = var.user_assigned_managed_identities
  dynamic "spot" {
    for_each = var.spot == null ? [] : [var.spot]
    content {
      eviction_policy = spot.value.eviction_policy
      max_price       = spot.value.max_price
    }
  }

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

  # verify --junit, then the report's download, then the verdict. A failed check (exit 6) must
  # fail the build, but only after the report is here: Packer runs no provisioner after a failed
  # one, and Packer 1.6.6 has no error-cleanup-provisioner in HCL2 templates ("Blocks of type
  # "error-cleanup-provisioner" are not expected here"). So the verify step records verify's exit
  # status in remote_dir/hpcbake-verify.status and exits 0 when verify wrote the report (its own
  # status when it wrote none: nothing to download), the download follows, and the verify-status
  # step exits with the recorded status.
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
  provisioner "shell" {
    environment_vars = local.env
    inline           = ["sh ${local.step} verify-status"]
    valid_exit_codes = [0]
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
