from twisted.application.service import ServiceMaker

namesrv_controller = ServiceMaker("twisted-namesrv controller", "twisted_namesrv.controller.tap",
                                  "RocketMQ 5.x's controller on its own (as mqcontroller)", "namesrv-controller")
