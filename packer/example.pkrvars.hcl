subscription_id        = "00000000-0000-0000-0000-000000000000"
build_resource_group   = "rg-images"
gallery_resource_group = "rg-gallery"
gallery_name           = "hpcgallery"
gallery_image_name     = "hpcbake-ubuntu"
gallery_image_version  = "1.0.0"

# Your copy of the hpcbake release tarball for the VM's architecture (packer/README.md,
# "The hpcbake release"): a blob URL with a read-only SAS token, kept out of version control.
hpcbake_release_url = "https://ACCOUNT.blob.core.windows.net/hpcbake/hpcbake-VERSION-linux-x86_64.tar.gz?SAS"
# That tarball's line of the release's SHA256SUMS. Until it is filled in, packer validate refuses.
hpcbake_release_sha256 = "FILL IN: the line of hpcbake-VERSION-linux-x86_64.tar.gz in SHA256SUMS"
