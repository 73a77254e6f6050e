/**
 * The sequences a throughput-family scheduler keeps (one per request, by request index): prompt,
 * output length, tokens generated, KV tokens held, and where it is.
 */
export interface BaseSeq {
  readonly id: number;
  readonly prompt: number;
  readonly output: number;
  generated: number;
  kvTokens: number;
  state: 'waiting' | 'running' | 'swapped' | 'done';
}

export const seqsOf = (reqs: readonly { readonly promptTokens: number; readonly outputTokens: number }[]): BaseSeq[] =>
  reqs.map((r, id) => ({
    id,
    prompt: r.promptTokens,
    output: Math.max(1, r.outputTokens),
    generated: 0,
    kvTokens: 0,
    state: 'waiting',
  }));
