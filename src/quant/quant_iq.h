/* quant_iq.h — private to src/quant: the 1-3 bit i-quant encoders (quant_iq.c) and the search
 * they share with the K-quant encoders (quant_quantize.c). Read next: quant_iq.c. */
#ifndef SNUG_QUANT_IQ_H
#define SNUG_QUANT_IQ_H

#include <stdbool.h>
#include <stdint.h>

/* Encode one 256-element super-block x of an i-quant type (IQ2_XXS, IQ2_XS, IQ2_S, IQ3_XXS,
 * IQ3_S, IQ1_S, IQ1_M) into b, with importance qw (256 values, or NULL). False for another
 * type or when the lattice tables could not be allocated. */
bool snug_quant_iq_block(uint32_t type, const float *x, const float *qw, uint8_t *b);

/* ggml's make_qp_quants: levels 0..nmax of non-negative x under weights w; returns the scale. */
float snug_quant_fit_positive(int n, int nmax, const float *x, uint8_t *L, const float *w);

#endif
