/* The release binary is linked against Debian 11's glibc 2.31 (packaging/static/sysroot.sh) so
 * that it starts on every distro hpcbake bakes, down to EL 8 (glibc 2.28). The compiler is
 * Debian 12's g++ 12, and its static libstdc++.a and libgcc_eh.a were built against glibc 2.36:
 * they call three functions glibc 2.31 lacks. This file gives the executable its own
 * definitions of those three, each with the meaning glibc documents, built only from functions
 * glibc 2.28 has. They bind inside the executable only (nothing here is exported to shared
 * libraries), so on a newer glibc the library's own copies are simply not used by hpcbake.
 * tests/release checks that the binary needs no GLIBC_ version above its stated floor. */
#define _GNU_SOURCE
#include <errno.h>
#include <link.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <sys/random.h>

/* glibc 2.32: non-zero while the process is known to have one thread. libstdc++ reads it to
 * skip atomic reference counting; 0 ("maybe several threads") is always correct, only slower. */
char __libc_single_threaded = 0;

/* glibc 2.36 (std::random_device's default source in libstdc++ 12): a uniformly random 32-bit
 * value that cannot fail. getrandom(2) (glibc 2.25) blocks only until the kernel's pool is
 * first initialised, which is what glibc's own arc4random does too. */
uint32_t arc4random(void) {
  uint32_t v;
  size_t got = 0;
  while (got < sizeof v) {
    ssize_t n = getrandom((char*)&v + got, sizeof v - got, 0);
    if (n > 0) {
      got += (size_t)n;
    } else if (n < 0 && errno != EINTR) {
      abort(); /* glibc's arc4random also terminates the process when no randomness is available */
    }
  }
  return v;
}

/* glibc 2.35 (the unwinder in libgcc_eh.a, gcc 12): finds the loaded object that contains
 * `address` and its PT_GNU_EH_FRAME segment, through dl_iterate_phdr as libgcc did before. The
 * layout is glibc's struct dl_find_object on x86_64 and aarch64 (<dlfcn.h>, 2.35 and later),
 * where DLFO_STRUCT_HAS_EH_DBASE and DLFO_STRUCT_HAS_EH_COUNT are 0. */
struct dl_find_object {
  unsigned long long dlfo_flags;
  void* dlfo_map_start;
  void* dlfo_map_end;
  struct link_map* dlfo_link_map;
  void* dlfo_eh_frame;
  unsigned long long __dlfo_reserved[7];
};

struct find_state {
  uintptr_t address;
  struct dl_find_object* result;
  int found;
};

static int find_in_object(struct dl_phdr_info* info, size_t size, void* data) {
  (void)size;
  struct find_state* st = data;
  uintptr_t start = UINTPTR_MAX, end = 0;
  int contains = 0;
  void* eh_frame = NULL;
  for (ElfW(Half) i = 0; i < info->dlpi_phnum; ++i) {
    const ElfW(Phdr)* ph = &info->dlpi_phdr[i];
    if (ph->p_type == PT_LOAD) {
      uintptr_t lo = info->dlpi_addr + ph->p_vaddr, hi = lo + ph->p_memsz;
      if (lo < start) start = lo;
      if (hi > end) end = hi;
      if (st->address >= lo && st->address < hi) contains = 1;
    } else if (ph->p_type == PT_GNU_EH_FRAME) {
      eh_frame = (void*)(info->dlpi_addr + ph->p_vaddr);
    }
  }
  if (!contains) return 0;
  st->result->dlfo_flags = 0;
  st->result->dlfo_map_start = (void*)start;
  st->result->dlfo_map_end = (void*)end;
  st->result->dlfo_link_map = NULL; /* libgcc does not read it */
  st->result->dlfo_eh_frame = eh_frame;
  st->found = 1;
  return 1;
}

int _dl_find_object(void* address, struct dl_find_object* result) {
  struct find_state st = {(uintptr_t)address, result, 0};
  dl_iterate_phdr(find_in_object, &st);
  return st.found ? 0 : -1;
}
