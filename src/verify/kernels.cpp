#include "verify/kernels.hpp"

namespace hpcbake::verify::cuda {

// PTX ISA 4.0 (CUDA 6.0) for sm_50: the oldest target every supported GPU (M60 is sm_52,
// H100 sm_90) accepts; the driver JIT-compiles it for the GPU it runs on. c[i] = a[i] + b[i]
// for i < n, one thread per element (kernels/vadd.cu).
const char* const vadd_ptx = R"(//
// hpcbake verify: vector add, hand-written PTX
//
.version 4.0
.target sm_50
.address_size 64

.visible .entry hpcbake_vadd(
	.param .u64 hpcbake_vadd_a,
	.param .u64 hpcbake_vadd_b,
	.param .u64 hpcbake_vadd_c,
	.param .u32 hpcbake_vadd_n
)
{
	.reg .pred 	%p<2>;
	.reg .f32 	%f<4>;
	.reg .b32 	%r<6>;
	.reg .b64 	%rd<11>;

	ld.param.u64 	%rd1, [hpcbake_vadd_a];
	ld.param.u64 	%rd2, [hpcbake_vadd_b];
	ld.param.u64 	%rd3, [hpcbake_vadd_c];
	ld.param.u32 	%r2, [hpcbake_vadd_n];
	mov.u32 	%r3, %ctaid.x;
	mov.u32 	%r4, %ntid.x;
	mov.u32 	%r5, %tid.x;
	mad.lo.s32 	%r1, %r3, %r4, %r5;
	setp.ge.u32 	%p1, %r1, %r2;
	@%p1 bra 	DONE;
	cvta.to.global.u64 	%rd4, %rd1;
	cvta.to.global.u64 	%rd5, %rd2;
	cvta.to.global.u64 	%rd6, %rd3;
	mul.wide.u32 	%rd7, %r1, 4;
	add.s64 	%rd8, %rd4, %rd7;
	add.s64 	%rd9, %rd5, %rd7;
	add.s64 	%rd10, %rd6, %rd7;
	ld.global.f32 	%f1, [%rd8];
	ld.global.f32 	%f2, [%rd9];
	add.f32 	%f3, %f1, %f2;
	st.global.f32 	[%rd10], %f3;
DONE:
	ret;
}
)";

// The load of gpu.N.clocks_under_load (kernels/spin.cu): every thread runs eight dependent FMAs a
// round (x = x * 0.999 + 0.5, which stays finite) until %globaltimer (PTX ISA 3.1+, sm_30+) has
// advanced by `ns`, then stores its round count; the sign test on x keeps the FMAs from being
// optimized away. Same ISA and target as the vector add.
const char* const spin_ptx = R"(//
// hpcbake verify: spin (the load of gpu.N.clocks_under_load), hand-written PTX
//
.version 4.0
.target sm_50
.address_size 64

.visible .entry hpcbake_spin(
	.param .u64 hpcbake_spin_ns,
	.param .u64 hpcbake_spin_out
)
{
	.reg .pred 	%p<3>;
	.reg .f32 	%f<3>;
	.reg .b32 	%r<7>;
	.reg .b64 	%rd<9>;

	ld.param.u64 	%rd1, [hpcbake_spin_ns];
	ld.param.u64 	%rd2, [hpcbake_spin_out];
	mov.u32 	%r1, %ctaid.x;
	mov.u32 	%r2, %ntid.x;
	mov.u32 	%r3, %tid.x;
	mad.lo.s32 	%r4, %r1, %r2, %r3;
	cvt.rn.f32.u32 	%f1, %r3;
	mov.f32 	%f2, 0f3F7FBE77;
	mov.u32 	%r5, 0;
	mov.u64 	%rd3, %globaltimer;
LOOP:
	fma.rn.f32 	%f1, %f1, %f2, 0f3F000000;
	fma.rn.f32 	%f1, %f1, %f2, 0f3F000000;
	fma.rn.f32 	%f1, %f1, %f2, 0f3F000000;
	fma.rn.f32 	%f1, %f1, %f2, 0f3F000000;
	fma.rn.f32 	%f1, %f1, %f2, 0f3F000000;
	fma.rn.f32 	%f1, %f1, %f2, 0f3F000000;
	fma.rn.f32 	%f1, %f1, %f2, 0f3F000000;
	fma.rn.f32 	%f1, %f1, %f2, 0f3F000000;
	add.s32 	%r5, %r5, 1;
	mov.u64 	%rd4, %globaltimer;
	sub.s64 	%rd5, %rd4, %rd3;
	setp.lt.u64 	%p1, %rd5, %rd1;
	@%p1 bra 	LOOP;
	setp.lt.f32 	%p2, %f1, 0fBF800000;
	@%p2 add.s32 	%r5, %r5, 1073741824;
	cvta.to.global.u64 	%rd6, %rd2;
	mul.wide.u32 	%rd7, %r4, 4;
	add.s64 	%rd8, %rd6, %rd7;
	st.global.u32 	[%rd8], %r5;
	ret;
}
)";

std::vector<Kernel> kernels() {
  return {{"vadd", vadd_entry, vadd_ptx}, {"spin", spin_entry, spin_ptx}};
}

} // namespace hpcbake::verify::cuda
