// liblzma's own threaded decoder, alone: decodes an .xz to nothing (or to OUT) with THREADS
// threads under a threading memory limit of LIMIT MiB, then prints the output size, the peak
// RSS and what liblzma says it uses. docs/benchmarks.md ("Extract: liblzma's threaded
// decoder") compares it with hpcbake's two-thread block decoder (src/archive/xz_blocks.hpp).
// Build: cc -O2 -o /tmp/xz-mt bench/xz-mt.c -llzma   (liblzma-dev 5.4 or later)
// Usage: /tmp/xz-mt FILE THREADS LIMIT_MIB [OUT]
#include <fcntl.h>
#include <lzma.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/resource.h>
#include <unistd.h>

int main(int argc, char** argv) {
  if (argc < 4) {
    fprintf(stderr, "usage: %s FILE THREADS LIMIT_MIB [OUT]\n", argv[0]);
    return 2;
  }
  int fd = open(argv[1], O_RDONLY);
  int out_fd = argc > 4 ? open(argv[4], O_WRONLY | O_CREAT | O_TRUNC, 0644) : -1;
  if (fd < 0 || (argc > 4 && out_fd < 0)) {
    perror("open");
    return 1;
  }
  lzma_stream s = LZMA_STREAM_INIT;
  lzma_mt mt = {0};
  mt.threads = (uint32_t)atoi(argv[2]);
  mt.memlimit_threading = (uint64_t)atoi(argv[3]) << 20; // over it: fewer threads, then one
  mt.memlimit_stop = UINT64_MAX;
  if (lzma_stream_decoder_mt(&s, &mt) != LZMA_OK) {
    fprintf(stderr, "lzma_stream_decoder_mt failed\n");
    return 1;
  }
  static uint8_t in[1 << 16], out[1 << 20];
  s.next_out = out;
  s.avail_out = sizeof out;
  unsigned long long total = 0;
  uint64_t peak_memusage = 0;
  lzma_action action = LZMA_RUN;
  for (;;) {
    if (s.avail_in == 0 && action == LZMA_RUN) {
      ssize_t n = read(fd, in, sizeof in);
      s.next_in = in;
      s.avail_in = n > 0 ? (size_t)n : 0;
      if (n <= 0) action = LZMA_FINISH;
    }
    lzma_ret r = lzma_code(&s, action);
    if (lzma_memusage(&s) > peak_memusage) peak_memusage = lzma_memusage(&s);
    if (s.avail_out == 0 || r == LZMA_STREAM_END) {
      size_t got = sizeof out - s.avail_out;
      total += got;
      if (out_fd >= 0 && write(out_fd, out, got) != (ssize_t)got) {
        perror("write");
        return 1;
      }
      s.next_out = out;
      s.avail_out = sizeof out;
    }
    if (r == LZMA_STREAM_END) break;
    if (r != LZMA_OK) {
      fprintf(stderr, "lzma_code: %d\n", (int)r);
      return 1;
    }
  }
  struct rusage ru;
  getrusage(RUSAGE_SELF, &ru);
  printf("threads %s, limit %s MiB: %llu bytes out, peak RSS %.1f MiB, liblzma's peak memusage %.1f MiB\n", argv[2],
         argv[3], total, ru.ru_maxrss / 1024.0, peak_memusage / 1048576.0);
  lzma_end(&s);
  return 0;
}
