/** The status bar item: "Queued #3 · ~12 min" or "GPU 1×A100 · 63% · 12/80 GB"; a click (or Enter) opens the panel. */

import { Widget } from '@lumino/widgets';

import { statusText, waiting } from './model';
import { ComputeHubStore } from './store';

export class ComputeHubStatus extends Widget {
  constructor(
    private readonly store: ComputeHubStore,
    onClick: () => void
  ) {
    super();
    this.addClass('jp-ComputeHubStatus');
    this.node.title = 'ComputeHub: click for your work and GPUs';
    // A button for the keyboard too: Tab reaches it, Enter or Space opens the panel.
    this.node.setAttribute('role', 'button');
    this.node.tabIndex = 0;
    this.node.addEventListener('click', onClick);
    this.node.addEventListener('keydown', (ev: KeyboardEvent) => {
      if (ev.key === 'Enter' || ev.key === ' ') {
        ev.preventDefault();
        onClick();
      }
    });
    store.changed.connect(this.refresh, this);
    this.refresh();
  }

  refresh(): void {
    const { report, gpu, unreachable } = this.store;
    this.node.textContent = statusText(report, gpu, unreachable);
    this.node.classList.toggle('jp-mod-queued', !!report && waiting(report.workloads).length > 0);
    this.node.classList.toggle('jp-mod-offline', unreachable);
  }

  dispose(): void {
    this.store.changed.disconnect(this.refresh, this);
    super.dispose();
  }
}
