# The variables packer/hpcbake.pkr.hcl requires, with the names packer/README.md's steps create.
# Copy it (cp packer/example.pkrvars.hcl my.pkrvars.hcl), fill in your subscription and the
# release's URL and SHA-256, then: packer validate -var-file=my.pkrvars.hcl packer
# Every other variable has a default (README.md, "Variables"): distro is ubuntu-22.04, size (the
# size the image is for) Standard_ND96isr_H100_v5, build_vm_size (where it is baked) a
# general-purpose size, with the hardware verdict deferred to the first boot on the target
# (README.md, "Bake on any size, prove on the target"), security_type Standard.

subscription_id        = "00000000-0000-0000-0000-000000000000"
gallery_resource_group = "rg-hpcbake-gallery"
gallery_name           = "hpcbakegallery"
gallery_image_name     = "hpcbake-ubuntu-22.04"
gallery_image_version  = "1.0.0"

# Your copy of the hpcbake release tarball for the VM's architecture (README.md, step 2): a
# blob URL with a read-only SAS token. Keep the filled-in file out of version control.
hpcbake_release_url = "https://ACCOUNT.blob.core.windows.net/hpcbake/hpcbake-VERSION-linux-x86_64.tar.gz?SAS"
# That tarball's line of the release's SHA256SUMS. Until it is filled in, packer validate refuses.
hpcbake_release_sha256 = "FILL IN: the line of hpcbake-VERSION-linux-x86_64.tar.gz in SHA256SUMS"
