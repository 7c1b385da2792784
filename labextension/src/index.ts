/**
 * ComputeHub in JupyterLab: a status bar item and a side panel with where my
 * work stands (position, ETA, why it waits) and what this server's GPUs do.
 */

import { JupyterFrontEnd, JupyterFrontEndPlugin } from '@jupyterlab/application';
import { ISettingRegistry } from '@jupyterlab/settingregistry';
import { IStatusBar } from '@jupyterlab/statusbar';
import { LabIcon } from '@jupyterlab/ui-components';

import { NoticeLevel, Noticer, wanted } from './notify';
import { ComputeHubPanel } from './panel';
import { ComputeHubStatus } from './statusitem';
import { ComputeHubStore } from './store';

const ICON = new LabIcon({
  name: 'computehub:gpu',
  svgstr:
    '<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 24 24" width="16"><g class="jp-icon3" fill="#616161">' +
    '<rect x="5" y="5" width="14" height="14" rx="2" fill="none" stroke="#616161" stroke-width="2"/>' +
    '<rect x="9" y="9" width="6" height="6"/><rect x="8" y="1" width="2" height="3"/><rect x="14" y="1" width="2" height="3"/>' +
    '<rect x="8" y="20" width="2" height="3"/><rect x="14" y="20" width="2" height="3"/></g></svg>'
});

const OPEN = 'computehub:open-panel';
const LOGS = 'computehub:show-logs';
const NOTIFY = 'apputils:notify'; // JupyterLab's own notifications (toasts and the notification centre)

const PLUGIN_ID = 'computehub:plugin'; // its settings' schema is schema/plugin.json

const plugin: JupyterFrontEndPlugin<void> = {
  id: PLUGIN_ID,
  description: 'ComputeHub queue position, wait reason and GPU usage',
  autoStart: true,
  optional: [IStatusBar, ISettingRegistry],
  activate: (app: JupyterFrontEnd, statusBar: IStatusBar | null, registry: ISettingRegistry | null) => {
    const store = new ComputeHubStore();
    const panel = new ComputeHubPanel(store);
    panel.title.icon = ICON;
    app.shell.add(panel, 'right', { rank: 900 });

    app.commands.addCommand(OPEN, {
      label: 'Show ComputeHub',
      execute: () => {
        app.shell.activateById(panel.id);
        void store.poller.refresh();
      }
    });

    app.commands.addCommand(LOGS, {
      label: 'Show the logs of a ComputeHub job',
      execute: args => {
        app.shell.activateById(panel.id);
        void panel.openLogs(String(args.id));
      }
    });

    // Tell me when my work starts after waiting, ends, or is preempted, wherever I am in Lab.
    const noticer = new Noticer();
    let level: NoticeLevel = 'all';
    let looked: unknown = null;
    store.changed.connect(() => {
      if (!store.report || store.report === looked || !app.commands.hasCommand(NOTIFY)) {
        return;
      }
      looked = store.report;
      for (const n of noticer.update(store.report).filter(n => wanted(n, level))) {
        const actions = n.logs ? [{ label: 'Logs', commandId: LOGS, args: { id: n.logs } }] : [];
        void app.commands.execute(NOTIFY, {
          message: n.message,
          type: n.type,
          options: { autoClose: n.type === 'error' ? false : 10000, actions }
        });
      }
    });

    if (statusBar) {
      const item = new ComputeHubStatus(store, () => void app.commands.execute(OPEN));
      statusBar.registerStatusItem('computehub:status', { item, align: 'left', rank: 900 });
    }

    document.addEventListener('visibilitychange', () => store.poller.visibilityChanged());
    store.poller.start();

    // My settings (Settings > ComputeHub; an admin's defaults in overrides.json), now and as they change.
    if (registry) {
      const apply = (settings: ISettingRegistry.ISettings) => {
        level = settings.get('notifications').composite as NoticeLevel;
        store.poller.setInterval((settings.get('refreshSeconds').composite as number) * 1000);
      };
      registry
        .load(PLUGIN_ID)
        .then(settings => {
          apply(settings);
          settings.changed.connect(apply);
        })
        .catch(reason => console.warn('ComputeHub: settings not loaded, using the defaults', reason));
    }
  }
};

export default plugin;
