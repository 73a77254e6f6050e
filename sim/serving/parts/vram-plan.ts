/**
 * VRAM sizing for a serving run: the activation reserve (the largest iteration's activations),
 * the expert buffer's slot count (given, 'auto': what fits after dense weights, activations,
 * the KV reserve (with a hybrid model's recurrent state per request) and a segment cache, or every expert for the gpu-rich reference) and the VRAM
 * the pool is built with. A configuration that cannot fit is the user's error, named by field.
 */
import { UserError } from '../../kernel/errors.ts';
import type { HardwareProfile, ModelProfile } from '../../../hardware-profiles/types.ts';
import type { RequestSource } from '../../workload.ts';
import type { ServingConfig } from './state.ts';

/** Bytes of activations an iteration of `tokens` tokens holds (input, output, FFN intermediate, BF16). */
export function activationBytes(model: ModelProfile, tokens: number): number {
  const inter = Math.max(model.expertIntermediateSize, model.denseIntermediateSize, model.sharedIntermediateSize);
  return tokens * (4 * model.hiddenSize + 2 * inter) * 2;
}

export interface VramPlan {
  readonly activationReserveBytes: number;
  readonly slots: number;
  readonly vramBytes: number;
}

/**
 * Sizes VRAM for `src`'s requests; `segmentBytes` is a split-expert segment cache (0: none).
 * `expertsOnDrive` (the SSD tier): host DRAM need not hold the experts (ssd-tier.ts checks it).
 */
export function planVram(
  model: ModelProfile,
  hardware: HardwareProfile,
  config: ServingConfig,
  src: RequestSource,
  segmentBytes: number,
  expertsOnDrive = false,
): VramPlan {
  const d = model.derived;
  let maxPrompt = 1;
  let maxKv = 0;
  for (let i = 0; i < src.count; i++) {
    const p = src.promptTokens(i);
    maxPrompt = Math.max(maxPrompt, p);
    maxKv = Math.max(maxKv, (p + src.outputTokens(i)) * d.kvBytesPerToken + (d.recurrentStateBytesPerSequence ?? 0));
  }
  const iterTokenCap = Math.max(config.maxBatchTokens, maxPrompt) + config.maxBatchSize;
  const act = activationBytes(model, iterTokenCap);
  const allExperts = model.moeLayers * model.experts;
  let vramBytes = hardware.gpu.vramBytes;
  let slots: number;
  if (config.preloadAllExperts) {
    slots = allExperts;
    vramBytes = d.nonExpertBytes + allExperts * d.bytesPerExpert + act + config.maxBatchSize * maxKv;
  } else if (config.bufferSlots === 'auto') {
    const kvReserve = config.maxBatchSize * maxKv;
    const free = vramBytes - d.nonExpertBytes - act - kvReserve - segmentBytes;
    slots = Math.min(allExperts, Math.floor(free / d.bytesPerExpert));
    if (!(slots >= 1)) {
      throw new UserError(
        `${model.id} does not fit ${hardware.id}: ${vramBytes} B of VRAM cannot hold dense weights ` +
          `(${d.nonExpertBytes} B), activations (${act} B), KV for ${config.maxBatchSize} requests ` +
          `(${kvReserve} B) and one expert (${d.bytesPerExpert} B)`,
        undefined,
        'executor.bufferSlots',
        'auto',
      );
    }
  } else {
    slots = config.bufferSlots;
    const need = d.nonExpertBytes + slots * d.bytesPerExpert + segmentBytes + act + maxKv;
    if (need > vramBytes) {
      const seg = segmentBytes > 0 ? ` and a ${segmentBytes} B segment cache` : '';
      throw new UserError(
        `${slots} expert slots${seg} do not fit ${hardware.id}: dense ${d.nonExpertBytes} B + experts ` +
          `${slots * d.bytesPerExpert} B + activations ${act} B + one request's KV ${maxKv} B = ` +
          `${need} B > VRAM ${vramBytes} B`,
        undefined,
        'executor.bufferSlots',
        slots,
      );
    }
  }
  if (!expertsOnDrive && d.totalBytes > hardware.hostDramBytes) {
    throw new UserError(
      `${model.id} (${d.totalBytes} B) does not fit the host DRAM of ${hardware.id} (${hardware.hostDramBytes} B)`,
      undefined,
      'hardware',
      hardware.id,
    );
  }
  return { activationReserveBytes: act, slots, vramBytes };
}
