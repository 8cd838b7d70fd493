/* The e2e guest's MPI ping-pong (guest.sh, step mpi; docs/e2e.md). Built in the guest with Debian's
 * mpicc, run as two ranks by mpirun over UCX on soft-RoCE (rxe0).
 *
 *   pingpong OUT.json [LAT_ITERS] [BW_ITERS] [BW_WINDOW]
 *
 * Latency: LAT_ITERS round trips of an 8-byte message between rank 0 and rank 1, each timed on
 * its own; the one-way latency is half a round trip, reported as the median (and min, max).
 * Bandwidth: BW_ITERS times, rank 0 sends BW_WINDOW messages of 1 MiB at once (MPI_Isend) and
 * rank 1 answers with one 8-byte message when it has them all; the rate is the bytes sent over
 * the time taken, the median of the iterations (and the whole run's).
 * Each rank also reports what it ran under: its pid, host and RLIMIT_MEMLOCK / RLIMIT_NOFILE
 * (-1 = unlimited), so the host can compare them with the limits hpcbake set.
 * "messages" counts every message both ranks sent (warm-up included): each is at least one packet
 * on the RDMA device when the transport is RDMA. Rank 0 writes OUT.json; exit 0 when it did. */
#include <mpi.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>

#define SMALL 8
#define BIG (1 << 20)
#define WARMUP 10
#define MAX_WINDOW 64

static int cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

static double median(double *v, int n) {
  qsort(v, (size_t)n, sizeof *v, cmp_double);
  return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

static long long limit_of(int resource) { /* the soft limit; -1 when unlimited */
  struct rlimit r;
  if (getrlimit(resource, &r) != 0) return -2;
  return r.rlim_cur == RLIM_INFINITY ? -1 : (long long)r.rlim_cur;
}

struct rank_info {
  long long pid, memlock, nofile;
  char host[64];
};

/* LAT_ITERS timed round trips; one-way latencies in us into lat (rank 0). */
static void latency(int rank, int iters, double *lat) {
  char buf[SMALL] = {0};
  for (int i = -WARMUP; i < iters; i++) {
    double t0 = MPI_Wtime();
    if (rank == 0) {
      MPI_Send(buf, SMALL, MPI_CHAR, 1, 1, MPI_COMM_WORLD);
      MPI_Recv(buf, SMALL, MPI_CHAR, 1, 1, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
    } else {
      MPI_Recv(buf, SMALL, MPI_CHAR, 0, 1, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
      MPI_Send(buf, SMALL, MPI_CHAR, 0, 1, MPI_COMM_WORLD);
    }
    if (i >= 0) lat[i] = (MPI_Wtime() - t0) / 2 * 1e6;
  }
}

/* ITERS windows of WINDOW 1 MiB messages, rank 0 to rank 1; MB/s (10^6 bytes) per window into bw. */
static void bandwidth(int rank, int iters, int window, char *big, double *bw, double *total_s) {
  MPI_Request req[MAX_WINDOW];
  char ack[SMALL] = {0};
  *total_s = 0;
  for (int i = -1; i < iters; i++) { /* i = -1: one warm-up window, not timed */
    MPI_Barrier(MPI_COMM_WORLD);
    double t0 = MPI_Wtime();
    for (int w = 0; w < window; w++) {
      if (rank == 0)
        MPI_Isend(big + (size_t)w * BIG, BIG, MPI_CHAR, 1, 2, MPI_COMM_WORLD, &req[w]);
      else
        MPI_Irecv(big + (size_t)w * BIG, BIG, MPI_CHAR, 0, 2, MPI_COMM_WORLD, &req[w]);
    }
    MPI_Waitall(window, req, MPI_STATUSES_IGNORE);
    if (rank == 0)
      MPI_Recv(ack, SMALL, MPI_CHAR, 1, 3, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
    else
      MPI_Send(ack, SMALL, MPI_CHAR, 0, 3, MPI_COMM_WORLD);
    double dt = MPI_Wtime() - t0;
    if (i >= 0) {
      bw[i] = (double)window * BIG / dt / 1e6;
      *total_s += dt;
    }
  }
}

int main(int argc, char **argv) {
  int rank, size;
  MPI_Init(&argc, &argv);
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  if (argc < 2 || size != 2) {
    if (rank == 0) fprintf(stderr, "usage: mpirun -np 2 %s OUT.json [LAT_ITERS] [BW_ITERS] [BW_WINDOW]\n", argv[0]);
    MPI_Abort(MPI_COMM_WORLD, 2);
  }
  int lat_iters = argc > 2 ? atoi(argv[2]) : 200;
  int bw_iters = argc > 3 ? atoi(argv[3]) : 4;
  int window = argc > 4 ? atoi(argv[4]) : 4;
  if (lat_iters < 1 || bw_iters < 1 || window < 1 || window > MAX_WINDOW) {
    if (rank == 0) fprintf(stderr, "pingpong: LAT_ITERS, BW_ITERS >= 1 and 1 <= BW_WINDOW <= %d\n", MAX_WINDOW);
    MPI_Abort(MPI_COMM_WORLD, 2);
  }

  struct rank_info me = {getpid(), limit_of(RLIMIT_MEMLOCK), limit_of(RLIMIT_NOFILE), ""}, all[2];
  gethostname(me.host, sizeof me.host - 1);
  MPI_Gather(&me, sizeof me, MPI_BYTE, all, sizeof me, MPI_BYTE, 0, MPI_COMM_WORLD);

  double *lat = calloc((size_t)lat_iters, sizeof *lat), *bw = calloc((size_t)bw_iters, sizeof *bw);
  char *big = malloc((size_t)window * BIG);
  if (!lat || !bw || !big) {
    fprintf(stderr, "pingpong: rank %d: out of memory\n", rank);
    MPI_Abort(MPI_COMM_WORLD, 1);
  }
  memset(big, rank + 1, (size_t)window * BIG);
  double t_lat = MPI_Wtime();
  latency(rank, lat_iters, lat);
  t_lat = MPI_Wtime() - t_lat;
  double total_s;
  double t_bw = MPI_Wtime();
  bandwidth(rank, bw_iters, window, big, bw, &total_s);
  t_bw = MPI_Wtime() - t_bw;
  /* rank 1 received what rank 0 sent: its buffer now holds rank 0's bytes */
  int intact = big[0] == 1 && big[(size_t)window * BIG - 1] == 1, all_intact = 0;
  if (rank == 1) MPI_Send(&intact, 1, MPI_INT, 0, 4, MPI_COMM_WORLD);
  if (rank == 0) MPI_Recv(&all_intact, 1, MPI_INT, 1, 4, MPI_COMM_WORLD, MPI_STATUS_IGNORE);

  int rc = 0;
  if (rank == 0) {
    /* both directions, warm-ups included: 2 per round trip; per window WINDOW + 1 ack */
    long long messages = 2LL * (lat_iters + WARMUP) + (long long)(bw_iters + 1) * (window + 1) + 1;
    double lat_min = lat[0], lat_max = lat[0];
    for (int i = 1; i < lat_iters; i++) {
      if (lat[i] < lat_min) lat_min = lat[i];
      if (lat[i] > lat_max) lat_max = lat[i];
    }
    FILE *f = fopen(argv[1], "w");
    if (!f) {
      perror(argv[1]);
      rc = 1;
    } else {
      fprintf(f, "{\"ranks\":%d,\"mpi_library\":", size);
      char lib[MPI_MAX_LIBRARY_VERSION_STRING];
      int len;
      MPI_Get_library_version(lib, &len);
      fputc('"', f);
      for (int i = 0; i < len; i++)
        if (lib[i] >= 0x20 && lib[i] != '"' && lib[i] != '\\') fputc(lib[i], f);
      fputc('"', f);
      fprintf(f,
              ",\n \"latency\":{\"bytes\":%d,\"iterations\":%d,\"one_way_us_median\":%.2f,"
              "\"one_way_us_min\":%.2f,\"one_way_us_max\":%.2f,\"seconds\":%.3f},\n",
              SMALL, lat_iters, median(lat, lat_iters), lat_min, lat_max, t_lat);
      fprintf(f,
              " \"bandwidth\":{\"bytes\":%d,\"window\":%d,\"iterations\":%d,\"MBps_median\":%.2f,"
              "\"MBps_overall\":%.2f,\"seconds\":%.3f,\"intact\":%s},\n",
              BIG, window, bw_iters, median(bw, bw_iters), (double)bw_iters * window * BIG / total_s / 1e6, t_bw,
              all_intact ? "true" : "false");
      fprintf(f, " \"messages\":%lld,\n \"rank_info\":[", messages);
      for (int r = 0; r < 2; r++)
        fprintf(f, "%s{\"rank\":%d,\"pid\":%lld,\"host\":\"%s\",\"memlock\":%lld,\"nofile\":%lld}", r ? "," : "", r,
                all[r].pid, all[r].host, all[r].memlock, all[r].nofile);
      fprintf(f, "]}\n");
      rc = fclose(f) != 0;
    }
  }
  free(lat);
  free(bw);
  free(big);
  MPI_Finalize();
  return rc;
}
