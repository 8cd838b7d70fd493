# hpcbake image for AlmaLinux 9 (Gen2), published to an Azure Compute Gallery.
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
variable "image_publisher" {
  type    = string
  default = "almalinux"
}
variable "image_offer" {
  type    = string
  default = "almalinux-x86_64"
}
variable "image_sku" {
  type    = string
  default = "9-gen2"
}
variable "payload_dir" {
  type        = string
  default     = "payload"
  description = "Local directory uploaded to the VM: hpcbake-*.rpm, and optionally bundle.tar (hpcbake bundle create)."
}
variable "junit_out" {
  type    = string
  default = "hpcbake-verify-almalinux-9.xml"
}
variable "seal_args" {
  type        = string
  default     = "--deprovision"
  description = "Extra: add --remove-signing-key when modules were signed with hpcbake's generated key."
}

locals {
  install = "sudo hpcbake install --size ${var.vm_size} --yes --lock-timeout 3600 $([ -f /tmp/hpcbake-payload/bundle.tar ] && echo --bundle /tmp/hpcbake-payload/bundle.tar)"
}

source "azure-arm" "hpcbake" {
  subscription_id    = var.subscription_id
  tenant_id          = var.tenant_id
  client_id          = var.client_id
  client_secret      = var.client_secret
  use_azure_cli_auth = var.use_azure_cli_auth

  os_type         = "Linux"
  image_publisher = var.image_publisher
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

build {
  sources = ["source.azure-arm.hpcbake"]

  # hpcbake's package (and an optional offline bundle of the drivers).
  provisioner "shell" {
    inline = ["mkdir -p /tmp/hpcbake-payload"]
  }
  provisioner "file" {
    source      = "${var.payload_dir}/"
    destination = "/tmp/hpcbake-payload"
  }
  provisioner "shell" {
    inline = [
      "cloud-init status --wait || true",
      "sudo dnf install -y /tmp/hpcbake-payload/hpcbake-*.rpm",
      "hpcbake --version",
    ]
  }

  # First install: hpcbake reboots the VM itself when a step needs it (nouveau, a new
  # kernel); the SSH session drops, which Packer must accept.
  provisioner "shell" {
    inline            = ["${local.install} --reboot=auto"]
    expect_disconnect = true
    valid_exit_codes  = [0, 7]
  }
  # After the reboot: resume (done steps are skipped). A second reboot is still allowed.
  provisioner "shell" {
    pause_before      = "30s"
    inline            = ["${local.install} --reboot=auto"]
    expect_disconnect = true
  }
  # Must now be complete with no reboot left (exit 7 here fails the build).
  provisioner "shell" {
    pause_before = "30s"
    inline       = ["${local.install} --reboot=never"]
  }

  provisioner "shell" {
    inline = ["sudo hpcbake verify --size ${var.vm_size} --junit /tmp/hpcbake-verify.xml"]
  }
  provisioner "file" {
    direction   = "download"
    source      = "/tmp/hpcbake-verify.xml"
    destination = var.junit_out
  }

  # Last: refuses unless everything above held; writes /var/lib/hpcbake/image-manifest.json,
  # then waagent -force -deprovision+user. The provisioning user is gone afterwards, so the
  # script is not cleaned up.
  provisioner "shell" {
    inline          = ["sudo hpcbake seal ${var.seal_args}", "sync"]
    inline_shebang  = "/bin/sh -x"
    skip_clean      = true
  }
}
