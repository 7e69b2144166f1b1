/* Measures the costs memvisor uses as defaults for a guest minor fault and for host first-touch
 * backing: build with `cc -O2 -o faultcost faultcost.c`, run `./faultcost 262144`. The first
 * repetition faults pages the host has never backed; later ones reuse host-backed memory. */
#include <stdio.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <time.h>
#include <string.h>
static double now(){struct timespec t;clock_gettime(CLOCK_MONOTONIC,&t);return t.tv_sec+t.tv_nsec*1e-9;}
int main(int argc,char**argv){
  size_t n=(size_t)atol(argv[1]); size_t sz=n*4096;
  for(int rep=0;rep<3;rep++){
  char*p=mmap(0,sz,PROT_READ|PROT_WRITE,MAP_PRIVATE|MAP_ANONYMOUS,-1,0);
  madvise(p,sz,MADV_NOHUGEPAGE);
  double t0=now(); for(size_t i=0;i<n;i++) p[i*4096]=1; double t1=now();
  // resident pass
  double t2=now(); for(int k=0;k<10;k++) for(size_t i=0;i<n;i++) p[i*4096]++; double t3=now();
  printf("minor fault %.0f ns/page; resident touch %.2f ns/page\n",(t1-t0)/n*1e9,(t3-t2)/n/10*1e9);
  munmap(p,sz);}
  char a[4096],b[4096]; memset(a,1,4096); double t4=now(); for(int i=0;i<1000000;i++){memcpy(b,a,4096); a[i&4095]=b[(i*7)&4095];} double t5=now(); printf("memcpy 4KiB (cache-hot) %.0f ns\n",(t5-t4)/1e6*1e9);
}
