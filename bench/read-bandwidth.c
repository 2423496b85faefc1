/* The fastest this machine reads a buffer from memory: every thread XORs its share of `bytes`
 * (64-bit words; the compiler vectorises the loop), best of `runs` passes. No decode step that
 * reads every weight once can be faster than one such pass over the weights' bytes.
 * Usage: read-bandwidth <bytes> <threads> <runs>; prints the best pass in milliseconds. */
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

struct share { const uint64_t *words; size_t n; uint64_t x; };

static void *reduce(void *arg) {
  struct share *s = arg;
  uint64_t x = 0;
  for (size_t i = 0; i < s->n; i++) x ^= s->words[i];
  s->x = x;
  return NULL;
}

static double now(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return t.tv_sec + t.tv_nsec * 1e-9;
}

int main(int argc, char **argv) {
  if (argc != 4) return 2;
  size_t words = strtoull(argv[1], NULL, 10) / 8;
  int threads = atoi(argv[2]), runs = atoi(argv[3]);
  if (threads < 1 || threads > 256 || runs < 1 || words < (size_t)threads) return 2;
  uint64_t *buf = aligned_alloc(64, (words * 8 + 63) / 64 * 64);
  if (!buf) return 1;
  /* Distinct values: zero pages would all map to one physical page. */
  for (size_t i = 0; i < words; i++) buf[i] = i * 0x9E3779B97F4A7C15ull;
  pthread_t tid[256];
  struct share shares[256];
  double best = 1e30;
  uint64_t sink = 0;
  for (int r = 0; r < runs; r++) {
    size_t per = words / threads;
    double t0 = now();
    for (int k = 0; k < threads; k++) {
      shares[k] = (struct share){ buf + k * per, k == threads - 1 ? words - k * per : per, 0 };
      pthread_create(&tid[k], NULL, reduce, &shares[k]);
    }
    for (int k = 0; k < threads; k++) { pthread_join(tid[k], NULL); sink ^= shares[k].x; }
    double dt = now() - t0;
    if (dt < best) best = dt;
  }
  printf("%.4f %llu\n", best * 1e3, (unsigned long long)(sink & 1));
  return 0;
}
